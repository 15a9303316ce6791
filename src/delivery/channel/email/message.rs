//! The message itself: headers, bodies and envelope for one outbox row.

use std::time::SystemTime;

use lettre::Message;
use lettre::address::{Address, Envelope};
use lettre::message::dkim::{
    DkimCanonicalization, DkimCanonicalizationType, DkimConfig, DkimSigningAlgorithm, DkimSigningKey,
};
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
    /// `https://…/p/TOKEN`, the hosted preference page, for
    /// non-transactional categories: linked from the message's footer.
    pub preferences_url: Option<String>,
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

/// The Subject header. lettre encodes (RFC 2047) only the words that are not
/// plain ASCII, so a subject that contains a literal encoded word, e.g.
/// `=?utf-8?q?=E2=9C=93?=`, went out as written and every mail reader
/// decoded it: a template (or a payload rendered into one) could make the
/// subject read differently from what was sent. Such a subject is encoded
/// whole, so a reader shows exactly the characters the template produced.
fn subject(subject: &str) -> Option<HeaderValue> {
    if !subject.contains("=?") {
        return None;
    }
    let mut encoded = String::new();
    {
        let mut w = email_encoding::headers::writer::EmailWriter::new(&mut encoded, "Subject: ".len(), 0, false);
        email_encoding::headers::rfc2047::encode(subject, &mut w).ok()?;
    }
    Some(HeaderValue::dangerous_new_pre_encoded(HeaderName::new_from_ascii_str("Subject"), subject.to_owned(), encoded))
}

/// The headers a DKIM signature covers: the ones a reader trusts, and the
/// unsubscribe pair, so a relay cannot swap the link (RFC 8058 §4 asks for
/// both to be signed).
const DKIM_HEADERS: [&str; 8] =
    ["From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe", "List-Unsubscribe-Post", "X-Herald-Outbox-Id"];

/// A DKIM signer from a selector, a domain and a key: a PKCS#1 PEM RSA key
/// (`-----BEGIN RSA PRIVATE KEY-----`) or a base64 Ed25519 seed (32 bytes).
pub fn dkim_config(selector: &str, domain: &str, key: &str) -> Result<DkimConfig, String> {
    let algorithm = if key.contains("BEGIN RSA PRIVATE KEY") {
        DkimSigningAlgorithm::Rsa
    } else if key.contains("-----BEGIN") {
        return Err("expected a PKCS#1 RSA key (BEGIN RSA PRIVATE KEY) or a base64 Ed25519 seed".into());
    } else {
        DkimSigningAlgorithm::Ed25519
    };
    let key = DkimSigningKey::new(key.trim(), algorithm).map_err(|e| format!("not a usable {algorithm} key: {e}"))?;
    Ok(DkimConfig::new(
        selector.to_owned(),
        domain.to_owned(),
        key,
        DKIM_HEADERS.iter().map(|h| HeaderName::new_from_ascii_str(h)).collect(),
        DkimCanonicalization { header: DkimCanonicalizationType::Relaxed, body: DkimCanonicalizationType::Relaxed },
    ))
}

pub fn build(p: &Parts<'_>, dkim: Option<&DkimConfig>) -> Result<Built, String> {
    let message_id = message_id(p.outbox_id, p.from);
    let b = Message::builder().from(p.from.clone()).to(p.to.clone());
    let b = match subject(p.subject) {
        Some(encoded) => b.raw_header(encoded),
        None => b.subject(p.subject),
    };
    let mut b = b
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
    let (text, html) = match &p.preferences_url {
        Some(url) => (
            format!("{}\n\n--\nChoose which messages you get: {url}\n", p.text),
            p.html.map(|h| {
                let url = url.replace('&', "&amp;").replace('"', "&quot;");
                format!("{h}\n<p style=\"font-size:small;color:#666\"><a href=\"{url}\">Choose which messages you get</a></p>")
            }),
        ),
        None => (p.text.to_owned(), p.html.map(str::to_owned)),
    };
    let mut message = match html {
        Some(html) => b.multipart(MultiPart::alternative_plain_html(text, html)),
        None => b.singlepart(SinglePart::plain(text)),
    }
    .map_err(|e| format!("cannot build the message: {e}"))?;
    if let Some(d) = dkim {
        message.sign(d);
    }
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
            preferences_url: unsubscribe.then(|| "https://h.example/p/ptok".to_owned()),
            bounce_domain: Some("bounces.example.com"),
        }
    }

    #[test]
    fn headers_and_envelope() {
        let from: Mailbox = "Herald <news@example.com>".parse().unwrap();
        let built = build(&parts(&from, true), None).unwrap();
        let text = String::from_utf8(built.bytes).unwrap();
        assert!(text.contains("Message-ID: <0190-abc@example.com>"), "{text}");
        assert!(text.contains("X-Herald-Outbox-Id: 0190-abc"), "{text}");
        assert!(text.contains("List-Unsubscribe: <https://h.example/u/tok>,"), "{text}");
        assert!(text.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"), "{text}");
        assert_eq!(built.envelope.from().unwrap().to_string(), "bounce+0190-abc@bounces.example.com");
        assert!(text.contains("multipart/alternative"), "{text}");
    }

    #[test]
    fn dkim_signs_the_unsubscribe_headers() {
        use base64::Engine;
        let from: Mailbox = "news@example.com".parse().unwrap();
        let seed = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let dkim = dkim_config("s1", "example.com", &seed).unwrap();
        let text = String::from_utf8(build(&parts(&from, true), Some(&dkim)).unwrap().bytes).unwrap();
        let sig = text.split("DKIM-Signature:").nth(1).expect("signed").split("\r\n\r\n").next().unwrap();
        let sig = sig.replace(['\r', '\n', ' ', '\t'], "").to_ascii_lowercase();
        assert!(sig.contains("d=example.com") && sig.contains("s=s1") && sig.contains("a=ed25519-sha256"), "{sig}");
        assert!(sig.contains("list-unsubscribe:list-unsubscribe-post"), "{sig}");
        assert!(dkim_config("s", "d", "-----BEGIN PRIVATE KEY-----").is_err());
        assert!(dkim_config("s", "d", "not base64!").is_err());
    }

    #[test]
    fn transactional_has_no_unsubscribe() {
        let from: Mailbox = "news@example.com".parse().unwrap();
        let text = String::from_utf8(build(&parts(&from, false), None).unwrap().bytes).unwrap();
        assert!(!text.contains("List-Unsubscribe"), "{text}");
    }

    /// A subject with a literal encoded word is sent encoded, so readers
    /// show the characters the template produced, not what they decode to.
    #[test]
    fn a_literal_encoded_word_in_the_subject_is_encoded() {
        let from: Mailbox = "news@example.com".parse().unwrap();
        for subject in ["Code =?utf-8?q?=E2=9C=93?= ready", "=?UTF-8?B?8J+Riw==?=", "a=?b"] {
            let mut p = parts(&from, false);
            p.subject = subject;
            let bytes = build(&p, None).unwrap().bytes;
            let text = String::from_utf8(bytes.clone()).unwrap();
            let header = text.split("\r\n\r\n").next().unwrap();
            assert!(!header.contains(subject), "sent as written: {header}");
            let parsed = mail_parser::MessageParser::new().parse(&bytes).unwrap();
            assert_eq!(parsed.subject(), Some(subject), "{header}");
        }
        // An ordinary subject is left as lettre writes it.
        let text = String::from_utf8(build(&parts(&from, false), None).unwrap().bytes).unwrap();
        assert!(text.contains("Subject: Hello\r\n"), "{text}");
    }
}
