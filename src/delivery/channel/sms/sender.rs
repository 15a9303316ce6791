//! `sms.from`: who a text comes from.
//!
//! Three forms, told apart by their shape so one setting serves both
//! transports: a phone number (`+14155550100`, the usual sender and the
//! only one a recipient can reply STOP to), an alphanumeric sender ID
//! (`Herald`, one-way, refused by US and Canadian carriers but common
//! elsewhere), a short code (`12345`, 3 to 8 digits, leased from the
//! carriers), and for Twilio `messaging_service_sid=MG…`, a Messaging
//! Service that picks the number itself. Rejected: one setting per form
//! (`sms.from_number`, `sms.sender_id`, …), which lets two be set at once
//! with nothing to say which wins.

use std::fmt;

use super::phone::PhoneNumber;

/// A parsed `sms.from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender {
    Number(PhoneNumber),
    /// 1 to 11 characters of ASCII letters, digits and spaces, at least one
    /// a letter (the GSM alphanumeric address limit; all digits would be
    /// read as a short code).
    Alphanumeric(String),
    /// 3 to 8 digits, without `+`.
    ShortCode(String),
    /// A Twilio Messaging Service sid (`MG` and 32 hex digits).
    MessagingService(String),
}

/// What `sms.from` accepts, for error messages.
pub const EXPECTED: &str = "a phone number with its country code (\"+14155550100\"), an alphanumeric sender ID \
                            of 1 to 11 letters, digits and spaces (\"Herald\"), a short code of 3 to 8 \
                            digits, or \
                            \"messaging_service_sid=MG…\" for Twilio";

/// `sms.from` that is none of the three forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sms.from: {value:?} is not accepted: {why}; expected {EXPECTED}")]
pub struct InvalidSender {
    pub value: String,
    pub why: String,
}

impl Sender {
    pub fn parse(s: &str) -> Result<Sender, InvalidSender> {
        let refuse = |why: &str| Err(InvalidSender { value: s.to_owned(), why: why.to_owned() });
        let t = s.trim();
        if let Some(sid) = t.strip_prefix("messaging_service_sid=") {
            let ok = sid.len() == 34 && sid.starts_with("MG") && sid[2..].bytes().all(|b| b.is_ascii_hexdigit());
            return if ok { Ok(Sender::MessagingService(sid.to_owned())) } else { refuse("not MG and 32 hex digits") };
        }
        if t.starts_with('+') {
            return PhoneNumber::parse("sms.from", t).map(Sender::Number).or_else(|e| refuse(&e.problem.to_string()));
        }
        if (3..=8).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Sender::ShortCode(t.to_owned()));
        }
        let shaped = (1..=11).contains(&t.len())
            && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b' ')
            && t.bytes().any(|b| b.is_ascii_alphabetic());
        if shaped { Ok(Sender::Alphanumeric(t.to_owned())) } else { refuse("not a number, sender ID or service") }
    }

    /// The `from` a provider is given (a number, a sender ID or a sid).
    pub fn as_str(&self) -> &str {
        match self {
            Sender::Number(n) => n.as_str(),
            Sender::Alphanumeric(s) | Sender::ShortCode(s) | Sender::MessagingService(s) => s,
        }
    }
}

impl fmt::Display for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sender::MessagingService(sid) => write!(f, "messaging_service_sid={sid}"),
            other => f.write_str(other.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_are_told_apart() {
        assert_eq!(Sender::parse("+1 415 555 0100").unwrap().as_str(), "+14155550100");
        assert_eq!(Sender::parse("Herald").unwrap(), Sender::Alphanumeric("Herald".into()));
        assert_eq!(Sender::parse("12345").unwrap(), Sender::ShortCode("12345".into()));
        assert_eq!(Sender::parse("Shop 24").unwrap(), Sender::Alphanumeric("Shop 24".into()));
        let sid = format!("MG{}", "a1".repeat(16));
        let s = Sender::parse(&format!("messaging_service_sid={sid}")).unwrap();
        assert_eq!(s, Sender::MessagingService(sid.clone()));
        assert_eq!(s.to_string(), format!("messaging_service_sid={sid}"));
    }

    #[test]
    fn anything_else_is_refused_with_the_forms_named() {
        for bad in ["", "TwelveLetter", "12", "123456789", "Héra", "+1 000", "messaging_service_sid=MG12", "a_b"] {
            let e = Sender::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("alphanumeric sender ID"), "{e}");
        }
    }
}
