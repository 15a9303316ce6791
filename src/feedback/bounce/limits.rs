//! Bounds on a message's MIME structure, checked before the real parse.
//!
//! mail-parser reads `message/rfc822` inside `message/rfc822` without
//! recursion, but the tree it returns is nested as deep as the input, and
//! everything that walks or drops that tree (Rust's own drop glue included)
//! recurses once per level. A 1.6 MB message nesting 50,000 levels overflowed
//! the stack of the thread that parsed it and aborted the whole server,
//! which `catch_unwind` cannot prevent. Base64 or quoted-printable bodies of
//! `message/*` parts are parsed by mail-parser recursively (three levels), and
//! what is inside them is invisible in the raw bytes.
//!
//! So before the real parse, [`check`] measures the structure in three steps
//! that each stay bounded:
//!
//! 1. a byte scan counts the lines that start a `Content-Type` field: every
//!    level of nesting needs one (a `message/*` type, or a `multipart/digest`
//!    whose untyped parts default to `message/rfc822`), so more than
//!    [`MAX_PARTS`] of them is refused without parsing anything;
//! 2. mail-parser reads the message with `Content-Transfer-Encoding` ignored,
//!    which makes its parse flat (no decoding, no recursion), and the tree is
//!    walked with an explicit stack, counting depth and parts;
//! 3. a `message/*` part with a base64 or quoted-printable body is decoded
//!    here and measured the same way, to the same three levels mail-parser
//!    decodes, its depth added to the depth it sits at.
//!
//! Refusing a message (rather than reading its outer levels only) is
//! deliberate: a real bounce nests two or three levels and has a handful of
//! parts, so a message past these bounds is not one, and saying so beats a
//! guess from a truncated view.

use mail_parser::{HeaderName, Message, MessageParser, PartType};

use super::ParseError;

/// Deepest nesting of messages in messages accepted. Real bounces nest two
/// or three (a gateway's notice around a DSN around the original); 32 is far
/// above that and far below what could hurt a 2 MiB thread stack.
pub const MAX_NESTING: usize = 32;

/// Most MIME parts accepted in one message, nested ones included. A DSN has
/// three or four; a digest of returned messages a few dozen.
pub const MAX_PARTS: usize = 1000;

/// How many levels of encoded `message/*` bodies mail-parser decodes and
/// parses (its `MAX_NESTED_ENCODED`); measured to the same depth here.
const ENCODED_LEVELS: usize = 3;

/// Refuses a message whose structure exceeds [`MAX_NESTING`] or
/// [`MAX_PARTS`]; see the module documentation.
pub(crate) fn check(raw: &[u8]) -> Result<(), ParseError> {
    let mut parts = 0;
    measure(raw, 0, ENCODED_LEVELS, &mut parts)
}

fn too_deep() -> ParseError {
    ParseError::TooComplex(format!(
        "it nests messages inside messages more than {MAX_NESTING} levels deep; a real bounce nests two or three"
    ))
}

fn too_many_parts() -> ParseError {
    ParseError::TooComplex(format!("it has more than {MAX_PARTS} MIME parts; a real bounce has a handful"))
}

/// Measures one (possibly decoded) message found at `depth`, adding its
/// parts to `parts`.
fn measure(raw: &[u8], depth: usize, encoded_levels: usize, parts: &mut usize) -> Result<(), ParseError> {
    if content_type_fields(raw) > MAX_PARTS {
        return Err(too_many_parts());
    }
    // Content-Transfer-Encoding read as a content type: mail-parser then
    // sees no encoding it knows, so it decodes nothing and never recurses.
    // Other fields are kept raw (cheap); only the MIME ones matter here.
    let parser = MessageParser::new()
        .header_content_type(HeaderName::ContentType)
        .header_content_type(HeaderName::ContentTransferEncoding)
        .default_header_raw();
    // See `parse_mime` for why the parse alone runs under catch_unwind.
    let Ok(Some(message)) = std::panic::catch_unwind(|| parser.parse(raw)) else {
        // Not a message at all: the real parse says so in its own words.
        return Ok(());
    };
    // Step 1 bounded how deep this tree can be, so dropping it is safe.
    let mut stack: Vec<(&Message<'_>, usize)> = vec![(&message, depth)];
    while let Some((m, level)) = stack.pop() {
        *parts += m.parts.len();
        if *parts > MAX_PARTS {
            return Err(too_many_parts());
        }
        for part in &m.parts {
            if encoded_levels > 0
                && is_message(part)
                && let Some(decoded) = encoded_body(part, m.raw_message.as_ref())
            {
                // mail-parser parses the decoded body as a message one
                // level down; so does this.
                if level + 1 > MAX_NESTING {
                    return Err(too_deep());
                }
                measure(&decoded, level + 1, encoded_levels - 1, parts)?;
                continue;
            }
            if let PartType::Message(nested) = &part.body {
                if level + 1 > MAX_NESTING {
                    return Err(too_deep());
                }
                stack.push((nested, level + 1));
            }
        }
    }
    Ok(())
}

/// Lines that start a `Content-Type` field, case-insensitively. A line is
/// counted after `\n` or `\r` alike: over-counting only makes the bound
/// stricter.
fn content_type_fields(raw: &[u8]) -> usize {
    const NAME: &[u8] = b"content-type";
    raw.split(|&b| b == b'\n' || b == b'\r')
        .filter(|line| line.len() >= NAME.len() && line[..NAME.len()].eq_ignore_ascii_case(NAME))
        .count()
}

/// Whether mail-parser would read this part's body as a message.
fn is_message(part: &mail_parser::MessagePart<'_>) -> bool {
    matches!(part.body, PartType::Message(_))
        || part.headers.iter().any(|h| {
            h.name == HeaderName::ContentType
                && h.value.as_content_type().is_some_and(|ct| {
                    ct.ctype().eq_ignore_ascii_case("message")
                        && ct
                            .subtype()
                            .is_some_and(|s| s.eq_ignore_ascii_case("rfc822") || s.eq_ignore_ascii_case("global"))
                })
        })
}

/// The decoded body of a part whose transfer encoding is base64 or
/// quoted-printable, or `None` for any other encoding. Decoding is lenient
/// (stray characters are skipped) so that anything mail-parser's own
/// decoder could make of the body is measured too.
fn encoded_body(part: &mail_parser::MessagePart<'_>, raw: &[u8]) -> Option<Vec<u8>> {
    let encoding = part.headers.iter().find(|h| h.name == HeaderName::ContentTransferEncoding)?;
    let value = raw.get(encoding.offset_start as usize..encoding.offset_end as usize)?;
    let value = String::from_utf8_lossy(value).trim().to_ascii_lowercase();
    let start = part.offset_body as usize;
    let end = if part.offset_end as usize > start { part.offset_end as usize } else { raw.len() };
    let body = raw.get(start..end.min(raw.len()))?;
    if value.starts_with("base64") {
        let alphabet: Vec<u8> =
            body.iter().copied().filter(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/').collect();
        let usable = alphabet.len() / 4 * 4;
        use base64::Engine;
        base64::engine::general_purpose::STANDARD_NO_PAD.decode(&alphabet[..usable]).ok()
    } else if value.starts_with("quoted-printable") {
        Some(mail_parser::decoders::quoted_printable::quoted_printable_decode(body).unwrap_or_else(|| body.to_vec()))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> Vec<u8> {
        let mut m = b"From: MAILER-DAEMON@example.com\r\nSubject: Undelivered Mail Returned to Sender\r\n".to_vec();
        for _ in 0..levels {
            m.extend_from_slice(b"Content-Type: message/rfc822\r\n\r\n");
        }
        m.extend_from_slice(b"From: a@example.com\r\n\r\nbody\r\n");
        m
    }

    #[test]
    fn shallow_nesting_is_accepted_and_deep_nesting_refused() {
        assert!(check(&nested(3)).is_ok());
        assert!(check(&nested(MAX_NESTING)).is_ok());
        assert!(matches!(check(&nested(MAX_NESTING + 1)), Err(ParseError::TooComplex(_))));
        assert!(matches!(check(&nested(50_000)), Err(ParseError::TooComplex(_))));
    }

    #[test]
    fn nesting_hidden_in_base64_is_measured() {
        use base64::Engine;
        let inner = base64::engine::general_purpose::STANDARD.encode(nested(MAX_NESTING + 5));
        let wrapped = format!(
            "From: MAILER-DAEMON@example.com\r\nSubject: x\r\nContent-Type: message/rfc822\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n{inner}\r\n"
        );
        assert!(matches!(check(wrapped.as_bytes()), Err(ParseError::TooComplex(_))));
        let shallow = base64::engine::general_purpose::STANDARD.encode(nested(2));
        let ok = format!(
            "From: MAILER-DAEMON@example.com\r\nSubject: x\r\nContent-Type: message/rfc822\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n{shallow}\r\n"
        );
        assert!(check(ok.as_bytes()).is_ok());
    }

    #[test]
    fn too_many_parts_are_refused() {
        let mut m = b"From: a@example.com\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n".to_vec();
        for _ in 0..=MAX_PARTS {
            m.extend_from_slice(b"--b\r\n\r\nx\r\n");
        }
        m.extend_from_slice(b"--b--\r\n");
        assert!(matches!(check(&m), Err(ParseError::TooComplex(_))));
    }
}
