//! The bounced message's own headers, wherever the bounce put them.
//!
//! Standard DSNs attach them as `message/rfc822` or `text/rfc822-headers`;
//! free-text bounces paste them under a line such as "--- Below this line is
//! a copy of the message." Either way they are handed to `mail-parser`
//! (`parse_headers`) rather than read line by line here, so folding, encoded
//! words and odd spacing are handled in one place.

use mail_parser::{Header, HeaderName, HeaderValue, Message, MessageParser};

use super::address;

/// Longest `X-Herald-Outbox-Id` kept; Herald's ids are short, anything longer
/// is not one of ours.
const MAX_OUTBOX_ID_CHARS: usize = 200;

/// What Herald needs from the bounced message's headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OriginalHeaders {
    /// `Message-ID` without the angle brackets.
    pub message_id: Option<String>,
    pub herald_outbox_id: Option<String>,
    /// `To` addresses, lower-cased, in order.
    pub to: Vec<String>,
    /// The mailbox the copy was delivered to, from the receiving side's
    /// envelope headers (`Delivered-To`, `X-Original-To`, `Envelope-To`,
    /// `X-Envelope-To`, `X-Rcpt-To`): present in a complaint's copy of the
    /// message even when `To` is a list or the recipient was Bcc'd.
    pub delivered_to: Vec<String>,
    /// Sender-side addresses (`From`, `Sender`, `Return-Path`, `Reply-To`):
    /// these appear in bounce texts but are never the failed recipient.
    pub senders: Vec<String>,
}

impl OriginalHeaders {
    /// Reads the root header block of a parsed (nested) message.
    pub(crate) fn from_message(message: &Message<'_>) -> Self {
        let Some(root) = message.parts.first() else {
            return Self::default();
        };
        Self::from_headers(&root.headers, &message.raw_message)
    }

    /// Reads a header list whose offsets point into `raw`.
    pub(crate) fn from_headers(headers: &[Header<'_>], raw: &[u8]) -> Self {
        let mut out = Self::default();
        for header in headers {
            let raw_value = raw_value(header, raw);
            match &header.name {
                HeaderName::MessageId if out.message_id.is_none() => {
                    out.message_id = message_id(&header.value, &raw_value);
                }
                HeaderName::To => push_addresses(&mut out.to, &header.value, &raw_value),
                HeaderName::From | HeaderName::Sender | HeaderName::ReplyTo => {
                    push_addresses(&mut out.senders, &header.value, &raw_value);
                }
                HeaderName::ReturnPath => {
                    out.senders.extend(address::first(&raw_value));
                }
                HeaderName::Other(name)
                    if name.eq_ignore_ascii_case("X-Herald-Outbox-Id") && out.herald_outbox_id.is_none() =>
                {
                    out.herald_outbox_id = outbox_id(&raw_value);
                }
                HeaderName::Other(name) if ENVELOPE_TO.iter().any(|h| name.eq_ignore_ascii_case(h)) => {
                    for a in address::find_all(&raw_value) {
                        if !out.delivered_to.contains(&a.address) {
                            out.delivered_to.push(a.address);
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Reads headers pasted as text (a `text/rfc822-headers` part or the copy
    /// at the end of a free-text bounce).
    pub(crate) fn from_header_text(text: &str) -> Self {
        let text = normalise_header_text(text);
        if text.is_empty() {
            return Self::default();
        }
        match MessageParser::new().parse_headers(text.as_bytes()) {
            Some(message) => Self::from_message(&message),
            None => Self::default(),
        }
    }

    /// True when nothing useful was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.message_id.is_none() && self.herald_outbox_id.is_none() && self.to.is_empty() && self.senders.is_empty()
    }

    /// Fills what `self` lacks from `other`: the first source (the MIME
    /// attachment) wins, later ones (pasted copies) only complete it.
    pub(crate) fn merge(&mut self, other: Self) {
        if self.message_id.is_none() {
            self.message_id = other.message_id;
        }
        if self.herald_outbox_id.is_none() {
            self.herald_outbox_id = other.herald_outbox_id;
        }
        if self.to.is_empty() {
            self.to = other.to;
        }
        if self.delivered_to.is_empty() {
            self.delivered_to = other.delivered_to;
        }
        for sender in other.senders {
            if !self.senders.contains(&sender) {
                self.senders.push(sender);
            }
        }
    }
}

/// The receiving side's envelope-recipient headers (see
/// [`OriginalHeaders::delivered_to`]).
const ENVELOPE_TO: &[&str] = &["Delivered-To", "X-Original-To", "Envelope-To", "X-Envelope-To", "X-Rcpt-To"];

/// The header's value as written, unfolded; empty when the offsets do not
/// fit the buffer (never trusted blindly: a panic here would take the worker
/// down).
fn raw_value(header: &Header<'_>, raw: &[u8]) -> String {
    let bytes = raw.get(header.offset_start as usize..header.offset_end as usize).unwrap_or_default();
    String::from_utf8_lossy(bytes).split_whitespace().collect::<Vec<_>>().join(" ")
}

fn message_id(value: &HeaderValue<'_>, raw_value: &str) -> Option<String> {
    let parsed = match value {
        HeaderValue::Text(id) => Some(id.to_string()),
        HeaderValue::TextList(ids) => ids.first().map(|id| id.to_string()),
        _ => None,
    };
    let id = parsed.unwrap_or_else(|| raw_value.to_string());
    let id = id.trim().trim_start_matches('<').trim_end_matches('>').trim();
    (!id.is_empty() && !id.contains(char::is_whitespace)).then(|| id.to_string())
}

fn outbox_id(raw_value: &str) -> Option<String> {
    let id = raw_value.trim().trim_start_matches('<').trim_end_matches('>').trim();
    (!id.is_empty() && id.chars().count() <= MAX_OUTBOX_ID_CHARS).then(|| id.to_string())
}

fn push_addresses(out: &mut Vec<String>, value: &HeaderValue<'_>, raw_value: &str) {
    let before = out.len();
    if let HeaderValue::Address(list) = value {
        for addr in list.iter() {
            if let Some(a) = addr.address.as_deref().and_then(address::first) {
                out.push(a);
            }
        }
    }
    if out.len() == before {
        out.extend(address::find_all(raw_value).into_iter().map(|f| f.address));
    }
}

/// Makes pasted headers parseable: drops leading blank lines and an mbox
/// `From ` line, and removes a common indentation (some MTAs indent the
/// copy, which would otherwise read as one long folded header).
fn normalise_header_text(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().skip_while(|l| l.trim().is_empty()).collect();
    if lines.first().is_some_and(|l| l.trim_start().starts_with("From ")) {
        lines.remove(0);
    }
    let indent = lines
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| is_header_line(l.trim_start()))
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::with_capacity(text.len());
    for line in lines {
        let cut = line.char_indices().take_while(|(i, c)| *i < indent && c.is_whitespace()).count();
        out.push_str(line.get(cut..).unwrap_or(line));
        out.push('\n');
    }
    out
}

/// `Name: value` with a plausible field name.
pub(crate) fn is_header_line(line: &str) -> bool {
    let Some((name, _)) = line.split_once(':') else {
        return false;
    };
    !name.is_empty() && name.len() <= 40 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Header names that start the copy of an original message pasted into a
/// free-text bounce. Deliberately excludes DSN field names (`Action`,
/// `Status`, `Final-Recipient`...), which some MTAs paste into the
/// human-readable part and which belong to the report, and MIME part headers
/// (`Content-Type`...), which a broken multipart leaves in the text.
const ORIGINAL_HEADER_NAMES: &[&str] = &[
    "received",
    "return-path",
    "message-id",
    "dkim-signature",
    "domainkey-signature",
    "x-received",
    "arc-seal",
    "delivered-to",
    "date",
    "from",
    "to",
    "subject",
    "x-google-smtp-source",
    "authentication-results",
    "x-originating-ip",
    "x-envelope-from",
    "x-envelope-to",
    "reply-to",
    "x-herald-outbox-id",
];

/// Separator lines that announce the copy of the original message, matched
/// on the line with decoration (`-`, `=`, `*`, `:`) stripped and lower-cased.
const SEPARATOR_PHRASES: &[&str] = &[
    "below this line is a copy of the message",
    "this is a copy of the message",
    "this is a copy of your message",
    "original message follows",
    "unsent message follows",
    "message headers follow",
    "header of the original message",
    "copy of the original message",
    "copy of the message header",
    "original mail as follows",
    "original message headers",
];

/// Separator lines matched only when they are the whole line, because the
/// words also occur in ordinary sentences.
const SEPARATOR_LINES: &[&str] = &["original message", "returned message", "message headers", "original mail"];

/// Where the pasted original message starts in a free-text bounce body:
/// `(report, original)`. Without a copy, `original` is `None`.
pub(crate) fn split_inline_original(text: &str) -> (&str, Option<&str>) {
    let mut offset = 0;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        let start = offset;
        offset += line.len();
        let stripped = line
            .trim()
            .trim_matches(|c: char| matches!(c, '-' | '=' | '*' | ':' | '_' | '.' | ' '))
            .to_ascii_lowercase();
        let is_separator = (SEPARATOR_LINES.contains(&stripped.as_str())
            || SEPARATOR_PHRASES.iter().any(|p| stripped.contains(p)))
            && line.len() < 120;
        if is_separator {
            return (&text[..start], text.get(offset..));
        }
        if starts_header_block(&lines[i..]) {
            return (&text[..start], text.get(start..));
        }
    }
    (text, None)
}

/// A non-indented known header line followed by at least two more header
/// (or continuation) lines: the start of a pasted header block.
///
/// A bounce forwarded by a person arrives quoted (`> ` before every line),
/// pasted original included. Quoted, the block only counts when it starts
/// with a trace field (`Return-Path`, `Received`), which an MTA writes at
/// the top of the copy: the quoted notice itself begins with the `From:`,
/// `Date:` and `To:` a mail program shows, and is the report.
fn starts_header_block(lines: &[&str]) -> bool {
    let Some(first) = lines.first() else {
        return false;
    };
    let quoted = first.starts_with('>');
    let unquote = |l: &'_ str| -> Option<String> {
        if !quoted {
            return Some(l.to_string());
        }
        let l = l.strip_prefix('>')?;
        Some(l.strip_prefix(' ').unwrap_or(l).to_string())
    };
    let Some(head) = unquote(first) else {
        return false;
    };
    if head.starts_with([' ', '\t']) || !is_header_line(&head) {
        return false;
    }
    let name = head.split(':').next().unwrap_or("").to_ascii_lowercase();
    if !ORIGINAL_HEADER_NAMES.contains(&name.as_str())
        || (quoted && !matches!(name.as_str(), "return-path" | "received"))
    {
        return false;
    }
    lines
        .iter()
        .skip(1)
        .take(2)
        .filter_map(|l| unquote(l))
        .filter(|l| is_header_line(l) || (l.starts_with([' ', '\t']) && !l.trim().is_empty()))
        .count()
        == 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pasted_headers_with_outbox_id() {
        let h = OriginalHeaders::from_header_text(
            "\n   Message-ID: <abc@x.example>\n   X-Herald-Outbox-Id: ob_123\n   To: Kiji <K@Example.org>\n   From: s@y.example\n",
        );
        assert_eq!(h.message_id.as_deref(), Some("abc@x.example"));
        assert_eq!(h.herald_outbox_id.as_deref(), Some("ob_123"));
        assert_eq!(h.to, ["k@example.org"]);
        assert_eq!(h.senders, ["s@y.example"]);
    }

    #[test]
    fn splits_at_separator_or_header_block() {
        let (report, copy) = split_inline_original(
            "failed: <a@b.example>\n--- Below this line is a copy of the message.\nTo: a@b.example\n",
        );
        assert_eq!(report, "failed: <a@b.example>\n");
        assert_eq!(copy, Some("To: a@b.example\n"));

        let (report, copy) = split_inline_original(
            "The original message was received at Thu\nfailed\nReceived: x\n by y\nTo: z@q.example\n",
        );
        assert_eq!(report, "The original message was received at Thu\nfailed\n");
        assert!(copy.is_some_and(|c| c.starts_with("Received")));
    }

    #[test]
    fn splits_a_quoted_copy_at_its_trace_fields() {
        let forwarded = "> From: Mail Delivery Subsystem <MAILER-DAEMON>\n> Date: Thu, 29 Apr 2009\n\
                         > To: <s@example.jp>\n>\n> <k@example.com>... User unknown\n\
                         > Return-Path: <s@example.jp>\n> Received: from mx.example.org\n> \tby mx.example.jp\n\
                         > X-Virus-Scanned: ClamAV\n";
        let (report, copy) = split_inline_original(forwarded);
        assert!(report.starts_with("> From: Mail Delivery") && report.ends_with("User unknown\n"), "{report}");
        assert!(copy.is_some_and(|c| c.starts_with("> Return-Path")));
    }
}
