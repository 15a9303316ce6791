//! A flat view of a parsed message: the pieces a bounce is made of.
//!
//! `mail-parser` gives a tree of parts; bounce readers want "the
//! delivery-status blocks", "the human-readable texts" and "the original
//! headers" regardless of how an MTA nested them. Collecting them once here
//! keeps the readers free of MIME details.

use mail_parser::decoders::html::html_to_text;
use mail_parser::{HeaderName, HeaderValue, Message, MimeHeaders, PartType};

use super::address;
use super::original::{self, OriginalHeaders};

/// Longest text kept from one part. Bounce reports are short; a huge text
/// part is a pasted original message, and its tail never holds the report.
const MAX_TEXT_BYTES: usize = 512 * 1024;

pub(crate) struct MessageView {
    /// Top-level header fields as `(lower-cased name, unfolded raw value)`.
    pub headers: Vec<(String, String)>,
    /// Decoded `Subject`.
    pub subject: String,
    /// Addresses in the top-level `From`.
    pub from: Vec<String>,
    /// Addresses in the top-level `To` (for a bounce: the original sender).
    pub to: Vec<String>,
    /// Bodies of `message/delivery-status` parts.
    pub delivery_status: Vec<String>,
    /// Bodies of `message/feedback-report` parts.
    pub feedback_reports: Vec<String>,
    /// Human-readable text parts (HTML converted to text), in order.
    pub texts: Vec<String>,
    /// Candidate sources of the original headers, best first.
    originals: Vec<OriginalHeaders>,
}

impl MessageView {
    pub(crate) fn new(message: &Message<'_>) -> Self {
        let raw = message.raw_message.as_ref();
        let root_headers = message.parts.first().map(|p| p.headers.as_slice()).unwrap_or_default();
        let headers = root_headers
            .iter()
            .map(|h| {
                let value = raw
                    .get(h.offset_start as usize..h.offset_end as usize)
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                (h.name.as_str().to_ascii_lowercase(), value.split_whitespace().collect::<Vec<_>>().join(" "))
            })
            .collect();
        let mut view = Self {
            headers,
            subject: message.subject().unwrap_or_default().to_string(),
            from: addresses(root_headers, &HeaderName::From),
            to: addresses(root_headers, &HeaderName::To),
            delivery_status: Vec::new(),
            feedback_reports: Vec::new(),
            texts: Vec::new(),
            originals: Vec::new(),
        };
        view.collect_parts(message);
        view
    }

    fn collect_parts(&mut self, message: &Message<'_>) {
        let raw = message.raw_message.as_ref();
        let mut html_texts = Vec::new();
        for (index, part) in message.parts.iter().enumerate() {
            let (ctype, subtype) = part
                .content_type()
                .map(|ct| (ct.ctype().to_ascii_lowercase(), ct.subtype().unwrap_or("").to_ascii_lowercase()))
                .unwrap_or_else(|| ("text".into(), "plain".into()));

            // Some MTAs start a MIME part straight with the original headers
            // and no Content-Type; mail-parser then reads them as the part's
            // own headers. A Message-ID among a non-root part's headers is
            // the sign.
            if index > 0 && part.headers.iter().any(|h| h.name == HeaderName::MessageId) {
                let found = OriginalHeaders::from_headers(&part.headers, raw);
                if !found.is_empty() {
                    self.originals.push(found);
                }
            }

            match &part.body {
                PartType::Multipart(_) => {}
                PartType::Message(nested) => {
                    let mut found = OriginalHeaders::from_message(nested);
                    if found.is_empty() {
                        // Blank lines before the attached headers make
                        // mail-parser see a message without headers.
                        let own_bytes = nested
                            .parts
                            .first()
                            .and_then(|p| nested.raw_message.get(p.offset_header as usize..p.offset_end as usize))
                            .unwrap_or_default();
                        found = OriginalHeaders::from_header_text(&lossy_capped(own_bytes));
                    }
                    self.originals.push(found);
                }
                body => {
                    let bytes = part.contents();
                    match (ctype.as_str(), subtype.as_str(), body) {
                        ("message", "delivery-status" | "global-delivery-status", _) => {
                            self.delivery_status.push(lossy_capped(bytes));
                        }
                        ("message", "feedback-report", _) => {
                            self.feedback_reports.push(lossy_capped(bytes));
                        }
                        ("message", _, _) | ("text", "rfc822-headers", _) => {
                            self.originals.push(OriginalHeaders::from_header_text(&lossy_capped(bytes)));
                        }
                        (_, _, PartType::Html(html)) => html_texts.push(capped(html_to_text(html))),
                        (_, _, PartType::Text(text)) => self.push_text(capped(text.to_string())),
                        // A `multipart/*` without a usable boundary comes back as
                        // one opaque body; bounces like that are still text.
                        ("text" | "multipart", _, _) => self.push_text(lossy_capped(bytes)),
                        _ => {}
                    }
                }
            }
        }
        // HTML is only a fallback: in multipart/alternative it repeats the
        // plain text with markup noise (links, styles) that reads as addresses.
        if self.texts.is_empty() {
            for text in html_texts {
                self.push_text(text);
            }
        }
    }

    /// Keeps a text part and reads the original headers pasted into it.
    fn push_text(&mut self, text: String) {
        if let (_, Some(copy)) = original::split_inline_original(&text) {
            let found = OriginalHeaders::from_header_text(copy);
            if !found.is_empty() {
                self.originals.push(found);
            }
        }
        self.texts.push(text);
    }

    /// The original message's headers, merged from every source found.
    pub(crate) fn original_headers(&self) -> OriginalHeaders {
        let mut merged = OriginalHeaders::default();
        for source in &self.originals {
            merged.merge(source.clone());
        }
        merged
    }

    /// First top-level header with this (lower-case) name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Whether a text part carries DSN fields inline (some MTAs paste the
    /// delivery-status block into the text/plain part instead of a
    /// `message/delivery-status` part).
    pub(crate) fn has_inline_dsn(&self) -> bool {
        self.texts.iter().any(|t| {
            t.lines().any(|l| {
                let l = l.trim_start().to_ascii_lowercase();
                l.starts_with("final-recipient:") || l.starts_with("original-recipient:")
            })
        })
    }

    /// Whether the message presents itself as a delivery failure report.
    ///
    /// Any one sign is enough: a daemon sender, the null return path, an
    /// `X-Failed-Recipients` header, a bounce-like subject, or a failure
    /// sentence near the top of the text. The alternative, trusting only
    /// `multipart/report`, would miss every pre-RFC 3464 MTA.
    pub(crate) fn looks_like_bounce(&self) -> bool {
        if self.header("x-failed-recipients").is_some() {
            return true;
        }
        let from = self.header("from").unwrap_or("").to_ascii_lowercase();
        if BOUNCE_SENDERS.iter().any(|s| from.contains(s)) {
            return true;
        }
        let subject = self.subject.to_ascii_lowercase();
        if BOUNCE_SUBJECTS.iter().any(|s| subject.contains(s)) {
            return true;
        }
        self.texts.iter().any(|t| {
            let head: String = t.chars().take(4000).collect::<String>().to_ascii_lowercase();
            BOUNCE_SENTENCES.iter().any(|s| head.contains(s))
        })
    }
}

/// Sender names and local parts used by delivery subsystems.
const BOUNCE_SENDERS: &[&str] = &[
    "mailer-daemon",
    "mailer_daemon",
    "mailerdaemon",
    "mail-daemon",
    "postmaster",
    "post_master",
    "mail delivery",
    "mail deliver system",
    "ndr administrator",
    "mdaemon",
];

/// Subject words of delivery failure notices.
const BOUNCE_SUBJECTS: &[&str] = &[
    "undeliver",
    "undelivered",
    "delivery fail",
    "delivery status notification",
    "delivery notification",
    "returned mail",
    "returned to sender",
    "failure notice",
    "mail delivery",
    "delivery failure",
    "not delivered",
    "could not be delivered",
    "mail system error",
    "non-delivery",
    "nondeliverable",
    "delivery problem",
    "mail failure",
    "error sending",
    "unzustellbar",
    "nicht zustellbar",
    "non remis",
    "are not member",
];

/// Sentences that only a failure report writes.
const BOUNCE_SENTENCES: &[&str] = &[
    "could not be delivered",
    "was not delivered",
    "wasn't able to deliver",
    "unable to deliver",
    "undeliverable",
    "delivery has failed",
    "delivery failed",
    "permanent error",
    "failed permanently",
    "did not reach the following",
    "delivery to the following recipient",
    "following address(es) failed",
    "following addresses had delivery",
    "trouble delivering your message",
    "invalid user address",
    "no valid recipients",
    "you are not a member",
    "duplicated message-id",
    "error delivering your mail",
];

/// Addresses of an address header among `headers`.
fn addresses(headers: &[mail_parser::Header<'_>], name: &HeaderName<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for h in headers.iter().filter(|h| &h.name == name) {
        match &h.value {
            HeaderValue::Address(list) => {
                for addr in list.iter() {
                    if let Some(a) = addr.address.as_deref().and_then(address::first) {
                        out.push(a);
                    }
                }
            }
            HeaderValue::Text(text) => {
                out.extend(address::find_all(text).into_iter().map(|f| f.address));
            }
            _ => {}
        }
    }
    out
}

fn lossy_capped(bytes: &[u8]) -> String {
    let bytes = bytes.get(..MAX_TEXT_BYTES).unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// Cuts `text` to [`MAX_TEXT_BYTES`] on a character boundary.
fn capped(mut text: String) -> String {
    if text.len() > MAX_TEXT_BYTES {
        let mut cut = MAX_TEXT_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}
