//! Bounce, complaint and auto-reply parsing for the engagement outbox.
//!
//! A message that comes back to Herald's return path is one of: an RFC 3464
//! delivery status notification (DSN), an RFC 5965 (ARF) abuse/complaint report,
//! an RFC 3834 auto-reply (vacation and the like), an MTA's free-text bounce
//! that follows no standard (qmail, old Exim, Exchange 2003, Domino...), or
//! something that is none of these. [`parse`] sorts them out and returns one
//! [`BounceRecipient`] per affected recipient.
//!
//! MIME is left to `mail-parser`: a hand-written MIME walker was rejected
//! because broken bounces are exactly where home-grown MIME code goes wrong
//! (bad boundaries, missing `Content-Type`, nested `message/rfc822`). It is
//! pinned to 0.11: mail-parser 1.x requires Rust 1.98, newer than the stable
//! toolchain this service builds with. The modules here only interpret what
//! it hands back:
//!
//! * `view.rs` flattens the parsed tree into the pieces a bounce is made of;
//! * `dsn.rs` reads `message/delivery-status` field blocks;
//! * `arf.rs` reads `message/feedback-report` complaints;
//! * `ses.rs` reads Amazon SES/SNS JSON notifications sent as mail;
//! * `autoreply.rs` spots vacation and other automatic replies;
//! * `freetext.rs` digs recipients and codes out of non-standard bounces;
//! * `status.rs` extracts RFC 3463 / RFC 5321 codes and decides hard vs soft;
//! * `original.rs` reads the bounced message's own headers;
//! * `address.rs` finds e-mail addresses in text.

mod address;
mod arf;
mod autoreply;
mod dsn;
mod freetext;
pub mod limits;
mod original;
mod ses;
mod status;
mod view;

use mail_parser::{Message, MessageParser, MimeHeaders, PartType};
use serde::{Deserialize, Serialize};

use self::original::OriginalHeaders;
use self::view::MessageView;

/// Largest input [`parse`] accepts. Real bounces are a few KiB to a few
/// hundred KiB (some attach the whole original message); 10 MiB leaves room
/// for those while keeping a hostile or mis-routed upload from costing
/// unbounded memory and CPU in the outbox worker.
pub const MAX_INPUT_BYTES: usize = 10 * 1024 * 1024;

/// Longest `reason` kept per recipient. Diagnostic texts are usually one SMTP
/// reply; the cap only stops a runaway free-text block from bloating the
/// outbox row.
pub const MAX_REASON_CHARS: usize = 500;

/// At most this many recipients are reported per message, so a crafted
/// message listing millions of addresses cannot blow up the result.
const MAX_RECIPIENTS: usize = 1000;

/// What happened to one recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BounceKind {
    /// The address does not exist or is gone (unknown user/host, moved,
    /// domain accepts no mail): stop sending to it.
    Hard,
    /// Delivery failed for a reason that may go away (full mailbox, policy
    /// or spam block, timeouts, expired retries...).
    Soft,
    /// The recipient reported the message as abuse/spam (ARF), or opted out.
    Complaint,
    /// An automatic reply (vacation, out-of-office): the message was delivered.
    AutoReply,
    /// A warning that delivery is still being retried; not a bounce yet.
    Delayed,
}

/// One affected recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BounceRecipient {
    /// Lower-cased address. Empty only for a complaint whose report redacts the
    /// recipient; match such a complaint on `herald_outbox_id` or
    /// `original_message_id` instead.
    pub recipient: String,
    /// RFC 3463 enhanced status code (`5.1.1`), exactly as the message gives
    /// it; `None` when the message carries none (codes are never invented).
    pub status: Option<String>,
    /// RFC 5321 reply code (`550`) when the message quotes one.
    pub reply_code: Option<u16>,
    pub kind: BounceKind,
    /// The remote server's or the MTA's own words, whitespace-collapsed and
    /// cut to [`MAX_REASON_CHARS`].
    pub reason: String,
    /// `Message-ID` of the bounced message, without `<>`.
    pub original_message_id: Option<String>,
    /// `X-Herald-Outbox-Id` found in the bounced message's headers.
    pub herald_outbox_id: Option<String>,
    /// ARF `Feedback-Type` (`abuse`, `opt-out`...) for complaints.
    pub feedback_type: Option<String>,
    /// The DSN `Action` (`failed`, `delayed`) when the message gives one.
    pub action: Option<String>,
    /// The DSN `Remote-MTA` (the server that refused), when given.
    pub remote_mta: Option<String>,
}

/// Everything [`parse`] learned from one message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BounceReport {
    /// Empty when the message is not a bounce, complaint or auto-reply.
    pub recipients: Vec<BounceRecipient>,
    pub original_message_id: Option<String>,
    pub herald_outbox_id: Option<String>,
    /// The bounced message's `To` (or envelope recipient) if seen.
    pub original_to: Option<String>,
}

/// Why a byte string could not be parsed at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("the input is empty: pass the complete raw message (headers and body) as received on the return path")]
    Empty,
    #[error(
        "the input is {size} bytes, more than the {limit}-byte limit for a bounce; \
         real bounces are far smaller, so keep this message for manual review instead"
    )]
    TooLarge { size: usize, limit: usize },
    #[error("the input is not an e-mail message: {0}")]
    NotAMessage(String),
    #[error("the message is not read: {0}; keep it for manual review")]
    TooComplex(String),
}

/// Parses one raw message received on the return path.
///
/// Returns `Ok` with an empty `recipients` list for a message that is neither a
/// bounce, a complaint nor an auto-reply, and `Err` only when the input is not
/// a message at all. Never panics.
pub fn parse(raw: &[u8]) -> Result<BounceReport, ParseError> {
    if raw.is_empty() {
        return Err(ParseError::Empty);
    }
    if raw.len() > MAX_INPUT_BYTES {
        return Err(ParseError::TooLarge { size: raw.len(), limit: MAX_INPUT_BYTES });
    }
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err(ParseError::Empty);
    }
    // Before mail-parser builds a tree that every later walk (and its drop)
    // would recurse through: see `limits`.
    limits::check(raw)?;
    let message = parse_mime(raw)?;

    let mut report = parse_message(&message, 0);
    report.recipients.truncate(MAX_RECIPIENTS);
    for r in &mut report.recipients {
        r.reason = bound_reason(&r.reason);
        if r.original_message_id.is_none() {
            r.original_message_id.clone_from(&report.original_message_id);
        }
        if r.herald_outbox_id.is_none() {
            r.herald_outbox_id.clone_from(&report.herald_outbox_id);
        }
    }
    Ok(report)
}

/// Runs mail-parser over the input.
///
/// mail-parser never panics in release builds, but 0.11.9 keeps
/// `debug_assert!(false)` in its recovery code for broken multiparts (found
/// by fuzzing this module), so a debug build of the worker could be taken
/// down by a hostile bounce. The MIME parse alone therefore runs under
/// `catch_unwind`; this module's own code is deliberately not wrapped, so its
/// bugs still fail tests and fuzzing instead of being hidden.
fn parse_mime(raw: &[u8]) -> Result<Message<'_>, ParseError> {
    let parsed = std::panic::catch_unwind(|| MessageParser::new().parse(raw))
        .map_err(|_| ParseError::NotAMessage("its MIME structure is too broken to be read".into()))?;
    // The root part is checked here rather than trusted: everything below
    // reads the root header block.
    parsed.filter(|m| m.parts.first().is_some_and(|root| !root.headers.is_empty())).ok_or_else(|| {
        ParseError::NotAMessage("it does not start with RFC 5322 header fields (`Name: value` lines)".into())
    })
}

/// How deep [`parse_message`] follows bounces wrapped in bounces.
const MAX_WRAPPING: usize = 2;

/// Reads one (possibly nested) message.
///
/// Some gateways wrap the real DSN in a notice of their own ("Returned mail"
/// with the DSN attached as `message/rfc822`). When the wrapper yields no
/// recipient but presents itself as a bounce, the attached messages are read
/// as bounces in turn. Only then: the attachment of an ordinary bounce is the
/// bounced message itself, which must not be mistaken for a report.
fn parse_message(message: &Message<'_>, depth: usize) -> BounceReport {
    let view = MessageView::new(message);
    let may_unwrap = depth < MAX_WRAPPING && view.looks_like_bounce();
    let nested = || {
        message.parts.iter().filter_map(|part| match &part.body {
            PartType::Message(nested) => Some(nested),
            _ => None,
        })
    };
    // A notice without a report of its own around an attached DSN or ARF
    // report: the attachment is the real thing.
    if may_unwrap && view.delivery_status.is_empty() && view.feedback_reports.is_empty() {
        for inner in nested().filter(|m| is_report(m)) {
            let report = parse_message(inner, depth + 1);
            if !report.recipients.is_empty() {
                return report;
            }
        }
    }
    let report = classify_message(&view, depth > 0);
    if report.recipients.is_empty() && may_unwrap {
        for inner in nested() {
            let report = parse_message(inner, depth + 1);
            if !report.recipients.is_empty() {
                return report;
            }
        }
    }
    report
}

/// Whether a message carries a machine-readable report part.
fn is_report(message: &Message<'_>) -> bool {
    message.parts.iter().any(|p| {
        p.content_type().is_some_and(|ct| {
            ct.ctype().eq_ignore_ascii_case("message")
                && ct.subtype().is_some_and(|s| {
                    let s = s.to_ascii_lowercase();
                    s.ends_with("delivery-status") || s == "feedback-report"
                })
        })
    })
}

/// Picks the reading that fits the message. The order matters: a complaint
/// or a machine-readable DSN is trusted over free-text guessing, and a
/// bounce is checked before an auto-reply because several MTAs (Exim among
/// them) mark their bounces `Auto-Submitted: auto-replied` too. A `wrapped`
/// message (attached to another bounce) is never taken for an auto-reply.
fn classify_message(view: &MessageView, wrapped: bool) -> BounceReport {
    let original = view.original_headers();
    let mut report = BounceReport {
        recipients: Vec::new(),
        original_message_id: original.message_id.clone(),
        herald_outbox_id: original.herald_outbox_id.clone(),
        original_to: original.to.first().cloned(),
    };

    if !view.feedback_reports.is_empty() {
        report.recipients = arf::recipients(view, &original);
    } else if let Some(notification) = ses::find(view) {
        notification.apply(&mut report);
    } else if !view.delivery_status.is_empty() || view.has_inline_dsn() {
        report.recipients = dsn::recipients(view, &original);
    } else if view.looks_like_bounce() {
        report.recipients = freetext::recipients(view, &original);
    } else if !wrapped && autoreply::is_auto_reply(view) {
        report.recipients = autoreply::recipients(view, &original);
    }

    if report.original_to.is_none() {
        report.original_to = report
            .recipients
            .iter()
            .find(|r| !r.recipient.is_empty() && r.kind != BounceKind::AutoReply)
            .map(|r| r.recipient.clone());
    }
    report
}

/// Collapses whitespace and cuts to [`MAX_REASON_CHARS`] characters (not
/// bytes, so a multi-byte reason is never split inside a character).
fn bound_reason(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len().min(MAX_REASON_CHARS + 8));
    let mut count = 0;
    for word in reason.split_whitespace() {
        if !out.is_empty() {
            // A separator only when a character can still follow it, so the
            // result never ends in a space or exceeds the cap.
            if count + 1 >= MAX_REASON_CHARS {
                break;
            }
            out.push(' ');
            count += 1;
        }
        for ch in word.chars() {
            if count >= MAX_REASON_CHARS {
                return out;
            }
            out.push(ch);
            count += 1;
        }
    }
    out
}

/// Builds a recipient entry with the fields every reader fills the same way.
fn recipient_entry(address: String, kind: BounceKind, original: &OriginalHeaders) -> BounceRecipient {
    BounceRecipient {
        recipient: address,
        status: None,
        reply_code: None,
        kind,
        reason: String::new(),
        original_message_id: original.message_id.clone(),
        herald_outbox_id: original.herald_outbox_id.clone(),
        feedback_type: None,
        action: None,
        remote_mta: None,
    }
}

#[cfg(test)]
mod tests;
