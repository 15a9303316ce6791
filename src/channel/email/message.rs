//! The message itself: headers, bodies and envelope for one outbox row.

use std::time::SystemTime;

use lettre::Message;
use lettre::address::{Address, Envelope};
use lettre::message::header::{HeaderName, HeaderValue};
use lettre::message::{Mailbox, MultiPart, SinglePart};

/// Categories that get no List-Unsubscribe: a password reset or a receipt is
/// not something one can unsubscribe from.
pub const TRANSACTIONAL: &str = "transactional";

/// Everything needed to build one message.
#[derive(Debug, Clone)]
pub struct Parts<'a> {
    pub outbox_id: &'a str,
    pub from: &'a Mailbox,
    pub to: Mailbox,
    pub subject: &'a str,
    pub text: &'a str,
    pub html: Option<&'a str>,
    pub date: SystemTime,
    /// `https://…/u/TOKEN`, for non-transactional categories.
    pub unsubscribe_url: Option<String>,
    /// `mailto:…`, alongside the URL.
    pub unsubscribe_mailto: Option<String>,
    /// VERP: the envelope sender becomes `bounce+OUTBOX-ID@DOMAIN`.
    pub bounce_domain: Option<&'a str>,
}

/// A built message: what to hand the transport.
#[derive(Debug)]
pub struct Built {
    pub envelope: Envelope,
    pub bytes: Vec<u8>,
    pub message_id: String,
}

/// `<OUTBOX-ID@FROM-DOMAIN>`: the same for every attempt at one row, so a
/// redelivery after a crash can be recognised downstream, and a bounce that
/// quotes it names the row.
pub fn message_id(outbox_id: &str, from: &Mailbox) -> String {
    format!("<{outbox_id}@{}>", from.email.domain())
}

fn raw(name: &'static str, value: String) -> HeaderValue {
    HeaderValue::new(HeaderName::new_from_ascii_str(name), value)
}

pub fn build(p: &Parts<'_>) -> Result<Built, String> {
    let message_id = message_id(p.outbox_id, p.from);
    let mut b = Message::builder()
        .from(p.from.clone())
        .to(p.to.clone())
        .subject(p.subject)
        .date(p.date)
        .message_id(Some(message_id.clone()))
        .raw_header(raw("X-Herald-Outbox-Id", p.outbox_id.to_owned()));
    let mut unsubscribe = Vec::new();
    if let Some(url) = &p.unsubscribe_url {
        unsubscribe.push(format!("<{url}>"));
    }
    if let Some(m) = &p.unsubscribe_mailto {
        unsubscribe.push(format!("<{m}>"));
    }
    if !unsubscribe.is_empty() {
        b = b.raw_header(raw("List-Unsubscribe", unsubscribe.join(", ")));
    }
    // RFC 8058: one-click needs the https URL; a mailto alone does not qualify.
    if p.unsubscribe_url.is_some() {
        b = b.raw_header(raw("List-Unsubscribe-Post", "List-Unsubscribe=One-Click".into()));
    }
    let sender = match p.bounce_domain {
        Some(domain) => {
            let verp: Address = format!("bounce+{}@{domain}", p.outbox_id)
                .parse()
                .map_err(|e| format!("the VERP return path for {domain} is not an address: {e}"))?;
            verp
        }
        None => p.from.email.clone(),
    };
    let envelope =
        Envelope::new(Some(sender), vec![p.to.email.clone()]).map_err(|e| format!("cannot build the envelope: {e}"))?;
    b = b.envelope(envelope.clone());
    let message = match p.html {
        Some(html) => b.multipart(MultiPart::alternative_plain_html(p.text.to_owned(), html.to_owned())),
        None => b.singlepart(SinglePart::plain(p.text.to_owned())),
    }
    .map_err(|e| format!("cannot build the message: {e}"))?;
    Ok(Built { envelope, bytes: message.formatted(), message_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(from: &'a Mailbox, unsubscribe: bool) -> Parts<'a> {
        Parts {
            outbox_id: "0190-abc",
            from,
            to: "ann@example.org".parse().unwrap(),
            subject: "Hello",
            text: "plain body",
            html: Some("<p>html body</p>"),
            date: SystemTime::UNIX_EPOCH,
            unsubscribe_url: unsubscribe.then(|| "https://h.example/u/tok".to_owned()),
            unsubscribe_mailto: unsubscribe.then(|| "mailto:unsub@example.com?subject=tok".to_owned()),
            bounce_domain: Some("bounces.example.com"),
        }
    }

    #[test]
    fn headers_and_envelope() {
        let from: Mailbox = "Herald <news@example.com>".parse().unwrap();
        let built = build(&parts(&from, true)).unwrap();
        let text = String::from_utf8(built.bytes).unwrap();
        assert!(text.contains("Message-ID: <0190-abc@example.com>"), "{text}");
        assert!(text.contains("X-Herald-Outbox-Id: 0190-abc"), "{text}");
        assert!(text.contains("List-Unsubscribe: <https://h.example/u/tok>,"), "{text}");
        assert!(text.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"), "{text}");
        assert_eq!(built.envelope.from().unwrap().to_string(), "bounce+0190-abc@bounces.example.com");
        assert!(text.contains("multipart/alternative"), "{text}");
    }

    #[test]
    fn transactional_has_no_unsubscribe() {
        let from: Mailbox = "news@example.com".parse().unwrap();
        let text = String::from_utf8(build(&parts(&from, false)).unwrap().bytes).unwrap();
        assert!(!text.contains("List-Unsubscribe"), "{text}");
    }
}
