//! What an SMTP reply or a failed connection means for the message
//! (RFC 5321 reply codes, RFC 3463 enhanced status codes).
//!
//! | reply                                              | class     | outcome                                  |
//! |----------------------------------------------------|-----------|------------------------------------------|
//! | 4xx (421 included), any enhanced code              | Retry     | retried after `worker.retry`             |
//! | timeout, refused/dropped connection, TLS failure   | Retry     | retried                                  |
//! | 5xx with 5.1.1, 5.1.2, 5.1.6 or 5.1.10             | Bounce    | `bounced`, address suppressed            |
//! | 5xx with 5.7.x                                     | Policy    | `failed`, no suppression, metric raised  |
//! | any other 5xx (including 5xx without an enhanced code) | Terminal | `failed` with the server's reply     |
//!
//! A bare 550 with no enhanced code is *not* taken as a bounce: servers use
//! it for spam rejections and policy as often as for unknown mailboxes, and
//! suppressing a live address on a guess loses its owner's mail for good.

use std::fmt;

/// What to do about a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Retry,
    /// The mailbox does not exist (or the domain does not): suppress it.
    Bounce,
    /// Refused by policy (5.7.x): usually about our own setup (SPF, DKIM,
    /// reputation), so the recipient is not blamed.
    Policy,
    Terminal,
}

/// An RFC 3463 enhanced status code, `class.subject.detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enhanced {
    pub class: u8,
    pub subject: u16,
    pub detail: u16,
}

impl fmt::Display for Enhanced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.class, self.subject, self.detail)
    }
}

/// The enhanced status code at the start of a reply's text (after any
/// `-`/space continuation noise), if there is one.
pub fn enhanced_code(text: &str) -> Option<Enhanced> {
    let first = text.split_whitespace().next()?;
    let mut parts = first.split('.');
    let class: u8 = parts.next()?.parse().ok()?;
    let subject: u16 = parts.next()?.parse().ok()?;
    let detail: u16 = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !matches!(class, 2 | 4 | 5) || subject > 999 || detail > 999 {
        return None;
    }
    Some(Enhanced { class, subject, detail })
}

/// Classifies a negative SMTP reply: its three-digit code and its text.
pub fn classify_reply(code: u16, text: &str) -> Class {
    match code / 100 {
        4 => Class::Retry,
        5 => match enhanced_code(text) {
            Some(Enhanced { class: 5, subject: 1, detail: 1 | 2 | 6 | 10 }) => Class::Bounce,
            Some(Enhanced { class: 5, subject: 7, .. }) => Class::Policy,
            _ => Class::Terminal,
        },
        // Anything else negative is not a reply we understand: try again
        // rather than give the message up on a misreading.
        _ => Class::Retry,
    }
}

/// Why a send did not go through.
#[derive(Debug)]
pub enum SendFailure {
    /// The transport could not be set up (TLS parameters and the like).
    Setup(String),
    /// Connecting failed, or the exchange timed out (our own connector).
    Io(String),
    Smtp(lettre::transport::smtp::Error),
}

/// A classified failure and the detail to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub class: Class,
    pub detail: String,
}

impl SendFailure {
    pub fn classify(&self) -> Classified {
        let e = match self {
            SendFailure::Setup(why) => {
                return Classified {
                    class: Class::Retry,
                    detail: format!("could not set up the SMTP transport: {why}"),
                };
            }
            SendFailure::Io(why) => {
                return Classified { class: Class::Retry, detail: format!("the SMTP connection failed: {why}") };
            }
            SendFailure::Smtp(e) => e,
        };
        let source = std::error::Error::source(e).map(|s| s.to_string()).unwrap_or_default();
        if let Some(code) = e.status() {
            let code_num: u16 = code.to_string().parse().unwrap_or(0);
            let class = classify_reply(code_num, &source);
            let reply = format!("{code_num} {source}").trim().to_owned();
            let detail = match class {
                Class::Retry => format!("the SMTP server deferred the message: {reply}"),
                Class::Bounce => format!("the mailbox does not exist: {reply}"),
                Class::Policy => format!("the SMTP server refused the message by policy: {reply}"),
                Class::Terminal => format!("the SMTP server refused the message: {reply}"),
            };
            return Classified { class, detail };
        }
        let what = if e.is_timeout() {
            "the SMTP server did not answer in time"
        } else if e.is_tls() {
            "TLS with the SMTP server failed"
        } else if e.is_transport_shutdown() {
            "the SMTP transport was shut down"
        } else if e.is_client() {
            // e.g. STARTTLS required but not offered, or an address the
            // server cannot take (no SMTPUTF8): worth retrying once the
            // setup is fixed, and bounded by worker.max_attempts.
            "the SMTP exchange could not proceed"
        } else {
            "the connection to the SMTP server failed or was dropped"
        };
        Classified { class: Class::Retry, detail: format!("{what}: {e}") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enhanced_codes_are_read_from_the_text() {
        assert_eq!(enhanced_code("5.1.1 no such user"), Some(Enhanced { class: 5, subject: 1, detail: 1 }));
        assert_eq!(enhanced_code("5.1.10 null MX"), Some(Enhanced { class: 5, subject: 1, detail: 10 }));
        assert_eq!(enhanced_code("no such user"), None);
        assert_eq!(enhanced_code("5.1 half"), None);
        assert_eq!(enhanced_code("1.2.3 wrong class"), None);
    }

    #[test]
    fn transient_policy_and_other_permanent_replies() {
        let cases = [
            (451, "4.3.0 try again later", Class::Retry),
            (421, "4.3.2 service shutting down", Class::Retry),
            (452, "insufficient storage", Class::Retry),
            // A 4xx is a deferral whatever the enhanced code claims.
            (450, "5.1.1 odd server", Class::Retry),
            (554, "5.7.1 rejected by policy", Class::Policy),
            (550, "5.7.26 DMARC", Class::Policy),
            (552, "5.3.4 message too big", Class::Terminal),
            (550, "mailbox unavailable", Class::Terminal),
        ];
        for (code, text, class) in cases {
            assert_eq!(classify_reply(code, text), class, "{code} {text}");
        }
    }

    #[test]
    fn recipient_failures_bounce() {
        for text in ["5.1.1 user unknown", "5.1.2 bad domain", "5.1.6 moved", "5.1.10 null MX"] {
            assert_eq!(classify_reply(550, text), Class::Bounce, "{text}");
        }
        // Other 5.1.x (e.g. 5.1.3 bad syntax) are terminal, not bounces.
        assert_eq!(classify_reply(553, "5.1.3 bad address syntax"), Class::Terminal);
    }
}
