//! The few values every layer passes around, parsed once at the edge.
//!
//! A `UserId` or `ChannelName` that exists has already been checked, so the
//! store and the worker never re-validate, and an error about a bad value is
//! raised where the value came in, naming the field it came from.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a value was refused: the field, the value, and what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value:?} is not accepted; expected {expected}")]
pub struct InvalidValue {
    pub field: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl InvalidValue {
    pub fn new(field: &'static str, value: impl Into<String>, expected: &'static str) -> Self {
        let mut value = value.into();
        if value.len() > 80 {
            let cut = (0..=80).rev().find(|i| value.is_char_boundary(*i)).unwrap_or(0);
            value.truncate(cut);
            value.push('…');
        }
        InvalidValue { field, value, expected }
    }
}

/// Why text with U+0000 is refused: PostgreSQL's `text` cannot hold it
/// ("invalid byte sequence for encoding UTF8: 0x00"), while SQLite and
/// MariaDB can, so without this check the same request is a 201 on one
/// backend and a 500 on another. Found by reading what the `json_body` fuzz
/// target's inputs would write; `tests/fuzz_regressions.rs` keeps the cases.
pub const NUL_REFUSED: &str = "must not contain the NUL character (U+0000), which PostgreSQL cannot store";

/// Text from outside (a trigger's payload, a rendered template, a bounce)
/// made storable on every backend: each U+0000 becomes U+FFFD, the
/// replacement character. Used where refusing is not an option because the
/// text arrives with something that must still be recorded (a message to
/// deliver, a bounce to file). Rejected: dropping the character silently
/// (U+FFFD shows where something was), and escaping only on PostgreSQL
/// (the send log would then read differently per backend).
pub fn storable_text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') { std::borrow::Cow::Owned(s.replace('\0', "\u{FFFD}")) } else { std::borrow::Cow::Borrowed(s) }
}

/// What a text checked by its `parse` needs to cross serde and `format!`:
/// read from a `String` through `parse` (errors naming `$field`), written
/// back as its text, displayed as it is.
macro_rules! checked_text {
    ($name:ident, $field:literal) => {
        impl TryFrom<String> for $name {
            type Error = InvalidValue;
            fn try_from(s: String) -> Result<Self, InvalidValue> {
                $name::parse($field, &s)
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

/// The host application's identifier for a user: opaque to Herald.
///
/// Bounded because it is an indexed column in three dialects (MySQL's index
/// key limit is the tightest), and free of control characters because it is
/// shown on screens and in logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UserId(String);

impl UserId {
    pub const MAX_LEN: usize = 255;

    pub fn parse(field: &'static str, s: &str) -> Result<Self, InvalidValue> {
        const EXPECTED: &str = "1 to 255 bytes of text without control characters";
        if s.is_empty() || s.len() > Self::MAX_LEN || s.chars().any(char::is_control) {
            return Err(InvalidValue::new(field, s, EXPECTED));
        }
        Ok(UserId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

checked_text!(UserId, "user_id");

/// A topic's key, chosen by the host (`doc:42`, `team.7`): what users
/// subscribe to and a trigger may be addressed to.
///
/// A narrow alphabet because the key travels in URL paths
/// (`/v1/topics/doc:42/subscribers`) and in the CLI's arguments, where
/// anything needing escaping would be a trap; 200 characters because it is
/// the first column of the subscriptions' key in three dialects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TopicKey(String);

impl TopicKey {
    pub const MAX_LEN: usize = 200;
    pub const EXPECTED: &'static str = "1 to 200 characters from letters, digits and . _ : - (for example \"doc:42\")";

    pub fn parse(field: &'static str, s: &str) -> Result<Self, InvalidValue> {
        let ok = !s.is_empty()
            && s.len() <= Self::MAX_LEN
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if !ok {
            return Err(InvalidValue::new(field, s, Self::EXPECTED));
        }
        Ok(TopicKey(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

checked_text!(TopicKey, "topic_key");

/// What happened, as a trigger names it and a rule matches it
/// (`export.ready`). One definition for both: a rule saved with a type
/// the trigger API refuses (`order shipped`) could never be matched by a
/// trigger sent through the API, and said nothing about it. A host
/// writing `engagement_triggers` itself is not checked here; its types
/// are matched as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TriggerType(String);

impl TriggerType {
    pub const MAX_LEN: usize = 128;
    pub const EXPECTED: &'static str =
        "1 to 128 characters from letters, digits and . _ - : / (for example \"export.ready\")";

    pub fn parse(field: &'static str, s: &str) -> Result<Self, InvalidValue> {
        let ok = !s.is_empty()
            && s.len() <= Self::MAX_LEN
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'/'));
        if !ok {
            return Err(InvalidValue::new(field, s, Self::EXPECTED));
        }
        Ok(TriggerType(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The name a channel is registered under (`inbox`, `email`, `webhook`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ChannelName(String);

impl ChannelName {
    pub fn parse(field: &'static str, s: &str) -> Result<Self, InvalidValue> {
        const EXPECTED: &str = "1 to 64 characters from a-z, 0-9, '-' and '_' (for example \"inbox\" or \"email\")";
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            return Err(InvalidValue::new(field, s, EXPECTED));
        }
        Ok(ChannelName(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

checked_text!(ChannelName, "channel");

/// A status read from its word (one of `ALL`'s `as_str`, else an error
/// naming `status` and the words `$expected` lists) and shown as it.
macro_rules! status_words {
    ($name:ident, $expected:literal) => {
        impl FromStr for $name {
            type Err = InvalidValue;
            fn from_str(s: &str) -> Result<Self, InvalidValue> {
                $name::ALL
                    .into_iter()
                    .find(|st| st.as_str() == s)
                    .ok_or_else(|| InvalidValue::new("status", s, $expected))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// `engagement_outbox.status`: the row's lifecycle.
///
/// `scheduled → sending → sent | failed | suppressed | expired | cancelled`,
/// and `sending → scheduled` for a retry or a reclaimed claim. There is no
/// `bounced` here: from the queue's point of view a bounce is a row that
/// finished unsuccessfully (`failed`); the send log says which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    Scheduled,
    Sending,
    Sent,
    Failed,
    Suppressed,
    Expired,
    Cancelled,
}

impl OutboxStatus {
    pub const ALL: [OutboxStatus; 7] = [
        OutboxStatus::Scheduled,
        OutboxStatus::Sending,
        OutboxStatus::Sent,
        OutboxStatus::Failed,
        OutboxStatus::Suppressed,
        OutboxStatus::Expired,
        OutboxStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Scheduled => "scheduled",
            OutboxStatus::Sending => "sending",
            OutboxStatus::Sent => "sent",
            OutboxStatus::Failed => "failed",
            OutboxStatus::Suppressed => "suppressed",
            OutboxStatus::Expired => "expired",
            OutboxStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, OutboxStatus::Scheduled | OutboxStatus::Sending)
    }
}

status_words!(OutboxStatus, "scheduled, sending, sent, failed, suppressed, expired or cancelled");

/// `engagement_sends.status`: what happened to the message.
///
/// Finer than the outbox status on purpose: "the relay refused" (`failed`),
/// "we declined to try" (`suppressed`), "this mailbox does not exist"
/// (`bounced`), "it was no longer relevant" (`expired`) and "the recipient
/// complained" (`complained`) send an operator to different places.
///
/// `delivered` and `undelivered` depart from the list in DESIGN.md (issue
/// 30): a delivery report is what happened to the message after Herald
/// handed it over (the carrier says the handset got it, or did not). They
/// are rows the send log gains later for an outbox row that stays `sent`
/// ("did Herald hand it over" does not change), like a `bounced` or
/// `complained` row, but they are not outcomes: no worker decides them, so
/// [`SendStatus::is_report`] keeps them out of what counts outcomes. The
/// alternative, leaving reports only in the bounce evidence, kept "did the
/// handset get it" out of every answer to "did X get it".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendStatus {
    Sent,
    Failed,
    Suppressed,
    Bounced,
    Expired,
    Cancelled,
    Complained,
    /// A carrier's delivery report: the handset got it.
    Delivered,
    /// A carrier's delivery report: it did not reach the handset (a number
    /// that can never take a text is `bounced` instead).
    Undelivered,
}

impl SendStatus {
    pub const ALL: [SendStatus; 9] = [
        SendStatus::Sent,
        SendStatus::Failed,
        SendStatus::Suppressed,
        SendStatus::Bounced,
        SendStatus::Expired,
        SendStatus::Cancelled,
        SendStatus::Complained,
        SendStatus::Delivered,
        SendStatus::Undelivered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SendStatus::Sent => "sent",
            SendStatus::Failed => "failed",
            SendStatus::Suppressed => "suppressed",
            SendStatus::Bounced => "bounced",
            SendStatus::Expired => "expired",
            SendStatus::Cancelled => "cancelled",
            SendStatus::Complained => "complained",
            SendStatus::Delivered => "delivered",
            SendStatus::Undelivered => "undelivered",
        }
    }

    /// Whether this is a delivery report (what the carrier said after the
    /// hand-over) rather than an outcome.
    pub fn is_report(self) -> bool {
        matches!(self, SendStatus::Delivered | SendStatus::Undelivered)
    }

    /// The outbox status a row ends in when this is its outcome.
    pub fn outbox_status(self) -> OutboxStatus {
        match self {
            SendStatus::Sent => OutboxStatus::Sent,
            SendStatus::Suppressed => OutboxStatus::Suppressed,
            SendStatus::Expired => OutboxStatus::Expired,
            SendStatus::Cancelled => OutboxStatus::Cancelled,
            // The outbox has no 'bounced': a bounce arrives after the row is
            // done, so the row says failed and the send log says why.
            SendStatus::Failed | SendStatus::Bounced | SendStatus::Complained => OutboxStatus::Failed,
            // A report is about a message Herald handed over: the row stays
            // sent whatever the handset did.
            SendStatus::Delivered | SendStatus::Undelivered => OutboxStatus::Sent,
        }
    }
}

status_words!(
    SendStatus,
    "sent, failed, suppressed, bounced, expired, cancelled, complained, delivered or undelivered"
);

/// Why a row waits without an attempt counted: a hold, not a retry.
///
/// Decided where the hold is (the gate in `planning::workflow`, the
/// escalation check in `delivery::compose`), carried on `Outcome::Held` and
/// `RecordAction::Hold` to the store, which names it in the `held` event.
/// The row itself keeps only its `last_error` text (a hold is not an
/// attempt and writes no send-log row), so a row read back is told apart
/// from a retry's error by [`HoldReason::of_stored`], whose words are the
/// ones [`HoldReason::words`] renders into that text. A column for the
/// reason was the alternative; it would be a migration on three dialects
/// for a value the text already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// The rule's send window is closed.
    SendWindow,
    /// The recipient's quiet hours.
    QuietHours,
    /// An escalation follow-up waiting for its inbox message to be
    /// delivered, then read (or seen).
    Escalation,
    /// A text waiting for a slot of `sms.rate`, shared by every instance.
    SmsRate,
}

impl HoldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::SendWindow => "send_window",
            HoldReason::QuietHours => "quiet_hours",
            HoldReason::Escalation => "escalation",
            HoldReason::SmsRate => "sms_rate",
        }
    }

    /// What holds the message, in the words its detail uses: "held by the
    /// rule's send window (...) until ...", "waiting until ... for the inbox
    /// message ... to be read".
    pub fn words(self) -> &'static str {
        match self {
            HoldReason::SendWindow => "the rule's send window",
            HoldReason::QuietHours => "the recipient's quiet hours",
            HoldReason::Escalation => "the inbox message",
            HoldReason::SmsRate => "sms.rate",
        }
    }

    /// The reason of a hold whose detail was stored as a row's
    /// `last_error`; `None` for a retry's error.
    pub fn of_stored(detail: &str) -> Option<HoldReason> {
        let held_by = |r: HoldReason| detail.strip_prefix("held by ").is_some_and(|rest| rest.starts_with(r.words()));
        if held_by(HoldReason::SendWindow) {
            Some(HoldReason::SendWindow)
        } else if held_by(HoldReason::QuietHours) {
            Some(HoldReason::QuietHours)
        } else if held_by(HoldReason::SmsRate) {
            Some(HoldReason::SmsRate)
        } else if detail.starts_with("waiting ") && detail.contains(&format!(" {} ", HoldReason::Escalation.words())) {
            Some(HoldReason::Escalation)
        } else {
            None
        }
    }
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each status reads back from its word, and a refusal lists every word.
    #[test]
    fn statuses_read_their_words_and_a_refusal_lists_them_all() {
        let expected = |e: InvalidValue| e.expected;
        let outbox = expected("nope".parse::<OutboxStatus>().unwrap_err());
        for st in OutboxStatus::ALL {
            assert_eq!(st.as_str().parse::<OutboxStatus>().unwrap(), st);
            assert!(outbox.contains(st.as_str()), "{outbox} lacks {st}");
        }
        let sends = expected("nope".parse::<SendStatus>().unwrap_err());
        for st in SendStatus::ALL {
            assert_eq!(st.to_string().parse::<SendStatus>().unwrap(), st);
            assert!(sends.contains(st.as_str()), "{sends} lacks {st}");
        }
    }

    #[test]
    fn topic_key_takes_its_alphabet_and_length_only() {
        for good in ["doc:42", "team.7", "a", "A-z_0.9:x", &"k".repeat(200)] {
            assert_eq!(TopicKey::parse("topic_key", good).unwrap().as_str(), good);
        }
        for bad in ["", "doc 42", "doc/42", "é", "a\0", &"k".repeat(201)] {
            let e = TopicKey::parse("topic_key", bad).unwrap_err();
            assert_eq!((e.field, e.expected), ("topic_key", TopicKey::EXPECTED), "{bad:?}");
        }
    }

    #[test]
    fn user_id_refuses_empty_long_and_control_characters() {
        assert!(UserId::parse("user_id", "u-42").is_ok());
        let err = UserId::parse("user_id", "").unwrap_err();
        assert_eq!(err.field, "user_id");
        assert!(UserId::parse("user_id", &"x".repeat(256)).is_err());
        assert!(UserId::parse("user_id", "a\nb").is_err());
    }

    #[test]
    fn channel_name_error_names_what_is_accepted() {
        let err = ChannelName::parse("--channel", "E-Mail").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("--channel: \"E-Mail\""), "{text}");
        assert!(text.contains("a-z, 0-9"), "{text}");
    }

    #[test]
    fn bounced_is_failed_in_the_outbox() {
        assert_eq!(SendStatus::Bounced.outbox_status(), OutboxStatus::Failed);
        assert_eq!(SendStatus::Suppressed.outbox_status(), OutboxStatus::Suppressed);
        assert_eq!("sending".parse::<OutboxStatus>().unwrap(), OutboxStatus::Sending);
        assert!("bounced".parse::<OutboxStatus>().is_err());
    }

    #[test]
    fn delivery_reports_are_send_statuses_but_not_outcomes() {
        for st in SendStatus::ALL {
            assert_eq!(st.as_str().parse::<SendStatus>().unwrap(), st);
        }
        assert!("queued".parse::<SendStatus>().unwrap_err().to_string().contains("undelivered"));
        assert!(SendStatus::Delivered.is_report() && SendStatus::Undelivered.is_report());
        assert!(!SendStatus::Bounced.is_report() && !SendStatus::Sent.is_report());
        assert_eq!(SendStatus::Undelivered.outbox_status(), OutboxStatus::Sent, "the row stays sent");
    }
}
