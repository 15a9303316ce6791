//! Bounces that follow no standard: qmail, old Exim and Sendmail, Exchange
//! 2003, Domino, Gmail/Yahoo notices, mobile carriers and the like.
//!
//! They all say the same three things in their own words: which addresses
//! failed, the remote server's reply, and (often) a pasted copy of the
//! original message. Instead of one template per MTA (the approach of
//! sisimai's ~70 decoders, rejected here as too much surface to keep right),
//! the text is read with general rules:
//!
//! 1. cut off the pasted copy of the original message;
//! 2. every address left that is not the sender's is a failed recipient;
//! 3. the lines from one recipient's first mention to the next recipient's
//!    are that recipient's block; its codes and words decide the outcome.
//!
//! [`Report`] indexes the texts once, so that looking up a recipient's block
//! (also done for every record of a DSN) costs no rescan of the text.

use std::collections::{HashMap, HashSet};

use super::address::{self, Found};
use super::original::{OriginalHeaders, split_inline_original};
use super::view::MessageView;
use super::{BounceKind, BounceRecipient, recipient_entry, status};

/// Longest per-recipient block, in lines. A real block is a handful of lines;
/// the cap keeps a report without separators from swallowing a whole body.
const MAX_BLOCK_LINES: usize = 40;

/// Longest text, in bytes, that a block or its context is cut to before the
/// phrase and code searches, which keeps their cost bounded per recipient.
const MAX_BLOCK_BYTES: usize = 4096;

/// At most this many addresses of one report are taken as recipients; a
/// report naming more is a pasted list, and the rest of it is ignored.
const MAX_CANDIDATES: usize = 200;

/// Words that, just before an address, mark it as the sender or a contact
/// rather than a failed recipient (`MAIL FROM:<a@b>`, `envelope-from <a@b>`,
/// `please contact postmaster@b`).
///
/// `message-id` is there too: a forwarded or quoted bounce shows the
/// notice's own `Message-Id: <...@host>`, which has the shape of an address.
const SENDER_CONTEXT: &[&str] =
    &["from", "sender", "return-path", "reply-to", "errors-to", "contact", "mailto", "message-id", "in-reply-to"];

/// Phrases of a warning that delivery is still being retried.
const DELAY_PHRASES: &[&str] = &[
    "has been delayed",
    "is delayed",
    "delivery delayed",
    "(delay)",
    "warning message only",
    "temporary failure report",
    "will be retried",
    "will continue trying",
    "still trying",
    "do not need to resend",
    "do not need to re-send",
    "not yet been delivered",
];

/// The human-readable report: each text part without its pasted original,
/// split into lines, with the addresses of every line found once.
pub(crate) struct Report<'v> {
    sections: Vec<Vec<&'v str>>,
    addresses: Vec<Vec<Vec<Found>>>,
    /// Address -> (section, line) of its first mention.
    first_mention: HashMap<String, (usize, usize)>,
    /// Address -> SMTP stage read from a session transcript.
    transcript: HashMap<String, status::Stage>,
}

impl<'v> Report<'v> {
    pub(crate) fn new(view: &'v MessageView) -> Self {
        let sections: Vec<Vec<&str>> =
            view.texts.iter().map(|t| split_inline_original(t).0.lines().collect()).collect();
        let addresses: Vec<Vec<Vec<Found>>> =
            sections.iter().map(|lines| lines.iter().map(|l| address::find_all(l)).collect()).collect();
        let mut first_mention = HashMap::new();
        for (s, lines) in addresses.iter().enumerate() {
            for (l, found) in lines.iter().enumerate() {
                for f in found {
                    first_mention.entry(f.address.clone()).or_insert((s, l));
                }
            }
        }
        let transcript = transcript_stages(&sections, &addresses);
        Self { sections, addresses, first_mention, transcript }
    }

    /// All sections joined, cut to a bounded size.
    pub(crate) fn text(&self) -> String {
        let joined = self.sections.iter().map(|lines| lines.join("\n")).collect::<Vec<_>>().join("\n");
        cut(joined, 4 * MAX_BLOCK_BYTES)
    }

    /// The SMTP stage of the refusal of `addr`, read from a transcript.
    pub(crate) fn transcript_stage(&self, addr: &str) -> Option<status::Stage> {
        self.transcript.get(addr).copied()
    }

    /// The lines that talk about `addr`: from its first mention up to the
    /// next line naming another address, or a blank line after some content.
    /// Used to complete a DSN record that has no `Diagnostic-Code`, and to
    /// find the SMTP command in Postfix's "(in reply to RCPT TO command)".
    pub(crate) fn block_for(&self, addr: &str) -> Option<String> {
        let &(s, first) = self.first_mention.get(addr)?;
        let lines = &self.sections[s];
        let mut block = vec![lines[first]];
        for (l, line) in lines.iter().enumerate().skip(first + 1).take(MAX_BLOCK_LINES) {
            let others = self.addresses[s][l].iter().any(|f| f.address != addr);
            if others || (line.trim().is_empty() && block.len() > 1) {
                break;
            }
            if !line.trim().is_empty() {
                block.push(line);
            }
        }
        let text = cut(reason_lines(&block, addr), MAX_BLOCK_BYTES);
        (!text.trim().is_empty()).then_some(text)
    }
}

/// For every `<<<` reply line of a session transcript, the stage of the last
/// `>>> COMMAND` before it, for each address the reply names (Sendmail and
/// Courier write such transcripts; Sendmail reports pipelined RCPT refusals
/// after `>>> DATA`, which the caller weighs against the status code).
fn transcript_stages(sections: &[Vec<&str>], addresses: &[Vec<Vec<Found>>]) -> HashMap<String, status::Stage> {
    let mut out = HashMap::new();
    for (s, lines) in sections.iter().enumerate() {
        let mut last_command: Option<&str> = None;
        for (l, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with(">>>") {
                last_command = Some(trimmed);
            } else if trimmed.starts_with("<<<")
                && let Some(stage) = last_command.and_then(status::smtp_stage)
            {
                for f in &addresses[s][l] {
                    out.entry(f.address.clone()).or_insert(stage);
                }
            }
        }
    }
    out
}

/// A failed recipient and where it is first mentioned.
struct Candidate {
    address: String,
    section: usize,
    line: usize,
}

/// Failed recipients of a free-text bounce.
pub(crate) fn recipients(view: &MessageView, original: &OriginalHeaders) -> Vec<BounceRecipient> {
    if is_success_notice(view) {
        return Vec::new();
    }
    let report = Report::new(view);
    let senders: HashSet<&str> =
        view.to.iter().chain(&view.from).chain(&original.senders).map(String::as_str).collect();

    let mut candidates = find_candidates(&report, &senders);
    if candidates.is_empty() {
        // An address alone on its line is a recipient list entry even when it
        // equals the sender (people mail themselves; test data is anonymised).
        let own: HashSet<&str> = view.from.iter().map(String::as_str).collect();
        candidates = find_candidates_on_own_line(&report, &own);
    }
    if candidates.is_empty() {
        // Nothing in the report names the recipient: fall back on the
        // headers that do (Exim's X-Failed-Recipients), then on the original
        // message's To when it names exactly one address.
        let fallback: Vec<String> = match view.header("x-failed-recipients") {
            Some(list) => address::find_all(list).into_iter().map(|f| f.address).collect(),
            None if original.to.len() == 1 => original.to.clone(),
            None => Vec::new(),
        };
        let mut out: Vec<BounceRecipient> = Vec::new();
        for addr in fallback.into_iter().take(MAX_CANDIDATES) {
            if !out.iter().any(|r| r.recipient == addr) {
                out.push(build(view, original, &report, addr, None));
            }
        }
        return out;
    }
    candidates.truncate(MAX_CANDIDATES);

    let single = candidates.len() == 1;
    let mut out = Vec::with_capacity(candidates.len());
    for c in &candidates {
        // The block ends where another recipient is named, first mention or
        // not: reports written twice (a local-language summary, then the
        // MTA's English one, as Mail.ru and Japanese carriers send) name
        // every recipient again, and the last recipient's block must not run
        // on into the others' repeated diagnostics.
        let next_line = report.addresses[c.section]
            .iter()
            .enumerate()
            .skip(c.line + 1)
            .find(|(_, found)| {
                found.iter().any(|f| f.address != c.address && candidates.iter().any(|o| o.address == f.address))
            })
            .map(|(l, _)| l);
        let lines = &report.sections[c.section];
        let end = next_line.unwrap_or(lines.len()).min(c.line + MAX_BLOCK_LINES).min(lines.len());
        let first_in_section = candidates.iter().filter(|o| o.section == c.section).map(|o| o.line).min().unwrap_or(0);
        let block = Block { lines: &lines[c.line..end], preamble: &lines[..first_in_section.min(c.line)], single };
        out.push(build(view, original, &report, c.address.clone(), Some(block)));
    }
    // A 2.X.X code is a success notice ("delivered", "relayed"), not a failure.
    out.retain(|r| !r.status.as_deref().is_some_and(|s| s.starts_with('2')));
    out
}

/// Addresses in the report that are failed recipients, in order of first
/// mention.
fn find_candidates(report: &Report<'_>, senders: &HashSet<&str>) -> Vec<Candidate> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for (s, lines) in report.sections.iter().enumerate() {
        for (l, line) in lines.iter().enumerate() {
            let found = &report.addresses[s][l];
            for (k, f) in found.iter().enumerate() {
                if senders.contains(f.address.as_str()) || seen.contains(f.address.as_str()) {
                    continue;
                }
                if is_sender_context(line, f) || is_display_name(line, f, found.get(k + 1)) {
                    continue;
                }
                seen.insert(&f.address);
                out.push(Candidate { address: f.address.clone(), section: s, line: l });
                if out.len() > MAX_CANDIDATES {
                    return out;
                }
            }
        }
    }
    out
}

/// Addresses that stand alone on a line (`<a@b.example>:`), minus `exclude`.
fn find_candidates_on_own_line(report: &Report<'_>, exclude: &HashSet<&str>) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for (s, lines) in report.sections.iter().enumerate() {
        for (l, line) in lines.iter().enumerate() {
            let bare = strip_decoration(line);
            if let [only] = report.addresses[s][l].as_slice()
                && only.address == bare
                && !exclude.contains(bare.as_str())
                && !out.iter().any(|c| c.address == bare)
            {
                out.push(Candidate { address: bare, section: s, line: l });
                if out.len() > MAX_CANDIDATES {
                    return out;
                }
            }
        }
    }
    out
}

/// A line without surrounding brackets, quotes, list punctuation and space.
fn strip_decoration(line: &str) -> String {
    line.trim().trim_matches(|c: char| "<>\"':*,;".contains(c) || c.is_whitespace()).to_ascii_lowercase()
}

/// True when the words just before the address make it a sender or contact.
fn is_sender_context(line: &str, f: &Found) -> bool {
    // A header line quoted in the report (a forwarded notice's own `From:`
    // with a display name, its `Message-Id:`) names no failed recipient,
    // however far the address stands from the field name.
    const HEADER_FIELDS: &[&str] = &["from:", "sender:", "reply-to:", "return-path:", "message-id:", "in-reply-to:"];
    let head = line.trim_start_matches(['>', ' ', '\t']).to_ascii_lowercase();
    if HEADER_FIELDS.iter().any(|h| head.starts_with(h)) {
        return true;
    }
    let before = line.get(..f.start).unwrap_or("");
    let mut tail: Vec<char> = before.chars().rev().take(24).collect();
    tail.reverse();
    let tail = tail.into_iter().collect::<String>().to_ascii_lowercase();
    let tail = tail.trim_end_matches(|c: char| c.is_whitespace() || "<\"':=(".contains(c));
    // Sendmail's "(expanded from: <addr>)" names the recipient an alias or a
    // pipe was expanded from: the address the message was sent to.
    if tail.ends_with("expanded from") {
        return false;
    }
    SENDER_CONTEXT.iter().any(|w| tail.ends_with(w))
}

/// `bare@address <real@address>`: the bare one is a display name.
fn is_display_name(line: &str, f: &Found, next: Option<&Found>) -> bool {
    next.is_some_and(|n| line.get(f.end..n.start).is_some_and(|between| between.trim() == "<"))
}

/// The lines that concern one recipient.
struct Block<'a> {
    lines: &'a [&'a str],
    /// Lines before the first recipient of the section (shared context).
    preamble: &'a [&'a str],
    /// Whether this is the only recipient (then the preamble is all about it).
    single: bool,
}

fn build(
    view: &MessageView,
    original: &OriginalHeaders,
    report: &Report<'_>,
    addr: String,
    block: Option<Block<'_>>,
) -> BounceRecipient {
    let (own, context) = match &block {
        Some(b) => (
            cut(reason_lines(b.lines, &addr), MAX_BLOCK_BYTES),
            if b.single || b.preamble.len() <= 8 { cut(b.preamble.join("\n"), MAX_BLOCK_BYTES) } else { String::new() },
        ),
        // No block: the whole report is the only context there is.
        None => (String::new(), report.text()),
    };

    let may_use_context = block.as_ref().is_none_or(|b| b.single);
    let (mut status, mut reply) = status::find_codes(&own);
    if may_use_context {
        let (context_status, context_reply) = status::find_codes(&context);
        status = status.or(context_status);
        reply = reply.or(context_reply);
    }

    let stage =
        status::smtp_stage(&own).or_else(|| report.transcript_stage(&addr)).or_else(|| status::smtp_stage(&context));
    let whole = format!("{}\n{}\n{}", view.subject, context, own);
    let kind = if is_delay_notice(&whole) {
        BounceKind::Delayed
    } else {
        status::classify_in_context(status.as_deref(), reply, &own, &whole, stage)
    };
    let mut entry = recipient_entry(addr, kind, original);
    entry.status = status;
    entry.reply_code = reply;
    entry.reason = if own.trim().is_empty() { last_lines(&context, 3) } else { own };
    entry
}

/// The block without lines that only repeat the address.
fn reason_lines(lines: &[&str], addr: &str) -> String {
    lines
        .iter()
        .filter(|l| {
            let bare = strip_decoration(l);
            !bare.is_empty() && bare != addr
        })
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A delivery (or relay) confirmation sent from a bounce address: the
/// message arrived, so it is no bounce. Only when nothing in it speaks of a
/// failure, since a report can confirm some recipients and fail others.
fn is_success_notice(view: &MessageView) -> bool {
    const SUBJECTS: &[&str] = &["delivered:", "(success)", "successful mail delivery", "delivery confirmation"];
    const SUCCESS: &[&str] = &[
        "successfully delivered",
        "delivered successfully",
        "successfully relayed",
        "has been delivered to the following",
        "was delivered to the following",
        "delivery to the following recipient(s) was successful",
        "delivery to the following recipients was successful",
        "delivery to the following recipients succeeded",
        "delivery has completed",
        "relayed to the following",
    ];
    const FAILURE: &[&str] = &[
        "could not be delivered",
        "couldn't be delivered",
        "not be delivered",
        "not delivered",
        "undeliverable",
        "undelivered",
        "delivery has failed",
        "delivery failed",
        "failed recipient",
        "permanent error",
        "fatal error",
        "unable to deliver",
        "rejected",
        "returned mail",
        "returning message",
    ];
    let subject = view.subject.to_ascii_lowercase();
    let text = view.texts.iter().map(|t| t.to_ascii_lowercase()).collect::<Vec<_>>().join("\n");
    let says_success = SUBJECTS.iter().any(|s| subject.contains(s)) || SUCCESS.iter().any(|s| text.contains(s));
    says_success && !FAILURE.iter().any(|f| subject.contains(f) || text.contains(f))
}

fn is_delay_notice(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    DELAY_PHRASES.iter().any(|p| lower.contains(p))
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_context() {
        let line = "SMTP error after MAIL FROM:<s@x.example> for <r@y.example>";
        let found = address::find_all(line);
        assert!(is_sender_context(line, &found[0]));
        assert!(!is_sender_context(line, &found[1]));
    }

    #[test]
    fn display_name_address() {
        let line = "k@example.com <n@example.net>: malformed address";
        let found = address::find_all(line);
        assert!(is_display_name(line, &found[0], found.get(1)));
        assert!(!is_display_name(line, &found[1], None));
    }

    #[test]
    fn cut_respects_char_boundaries() {
        assert_eq!(cut("aé".to_string(), 2), "a");
        assert_eq!(cut("abc".to_string(), 5), "abc");
    }
}
