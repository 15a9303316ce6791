//! Bounce and complaint webhooks from email providers, each verified its own
//! way before anything is read from it, then turned into the same
//! [`BounceRecipient`]s the mail parser produces, so one path records them
//! all (`ingest::record`).
//!
//! - SendGrid: ECDSA P-256 over `timestamp || body` ([`sendgrid`]).
//! - Mailgun: HMAC-SHA256 over `timestamp || token`, each token accepted once
//!   ([`mailgun`]).
//! - Postmark: HTTP basic auth (Postmark signs nothing) ([`postmark`]).

pub mod mailgun;
pub mod postmark;
pub mod sendgrid;
pub mod ses;

use crate::clock::Millis;
use crate::feedback::bounce::{BounceKind, BounceRecipient};

/// How far a signed timestamp may be from now before the request is treated
/// as a replay.
pub const MAX_SKEW_SECS: i64 = 15 * 60;

/// Why a webhook request was refused; every one is a 401 that changes nothing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("{0} webhooks are not configured on this Herald")]
    NotConfigured(&'static str),
    #[error("missing {0}")]
    Missing(&'static str),
    #[error("the signature does not match")]
    BadSignature,
    #[error("the timestamp is more than 15 minutes from now: a replay, or a clock far off")]
    Stale,
    #[error("this token was seen before: a replay")]
    Replayed,
}

pub(crate) fn fresh(timestamp: &str, now: Millis) -> Result<(), VerifyError> {
    let t: i64 = timestamp.trim().parse().map_err(|_| VerifyError::Missing("a numeric timestamp"))?;
    if (now.0 / 1000 - t).abs() > MAX_SKEW_SECS {
        return Err(VerifyError::Stale);
    }
    Ok(())
}

/// A provider's event in the parser's shape.
///
/// `status` is kept only as a well-formed enhanced status code (`5.1.1`),
/// as the mail parser reports it: providers pass their own strings through,
/// and an arbitrary one would be stored in a column sized for codes
/// (`VARCHAR(16)` on MariaDB, where a longer one fails the insert).
pub(crate) fn recipient(
    email: &str,
    kind: BounceKind,
    status: Option<String>,
    reply_code: Option<u16>,
    reason: String,
    message_id: Option<String>,
) -> BounceRecipient {
    BounceRecipient {
        recipient: email.trim().to_ascii_lowercase(),
        status: status.as_deref().and_then(enhanced_status),
        reply_code,
        kind,
        reason: reason.chars().take(crate::feedback::bounce::MAX_REASON_CHARS).collect(),
        original_message_id: message_id.map(|m| m.trim_matches(|c| c == '<' || c == '>').to_owned()),
        herald_outbox_id: None,
        feedback_type: None,
        action: None,
        remote_mta: None,
    }
}

/// `5.1.1` at the start of a text, or anywhere in it.
pub(crate) fn enhanced_status(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ';' || c == ',')
        .find(|w| {
            let p: Vec<&str> = w.split('.').collect();
            p.len() == 3
                && matches!(p[0], "2" | "4" | "5")
                && p[1..].iter().all(|x| !x.is_empty() && x.len() <= 3 && x.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
}

/// Hard when the code says the mailbox or domain does not exist.
pub(crate) fn kind_for_status(status: Option<&str>, permanent: bool) -> BounceKind {
    match status {
        Some("5.1.1" | "5.1.2" | "5.1.6" | "5.1.10") => BounceKind::Hard,
        _ if permanent => BounceKind::Soft,
        _ => BounceKind::Soft,
    }
}
