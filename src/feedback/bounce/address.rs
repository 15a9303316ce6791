//! Finding e-mail addresses inside free text.
//!
//! Bounce bodies quote addresses in every style: bare, in `<...>`, in quotes,
//! followed by `:` or `...`. Rather than one big regular expression (and a
//! regex dependency) the scanner anchors on each `@` and grows outwards over
//! the characters an address may hold; that is linear in the text and has no
//! pathological inputs.

/// One address found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// Byte offset of the first character of the address.
    pub start: usize,
    /// Byte offset just past the address.
    pub end: usize,
    /// The address, lower-cased.
    pub address: String,
}

fn is_local_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~.".contains(&b)
}

fn is_domain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'.'
}

/// Every plausible address in `text`, in order of appearance.
///
/// Skips things that only look like addresses: URL parameters, message-id
/// style tokens whose "domain" has no dot, and IP-literal domains.
pub(crate) fn find_all(text: &str) -> Vec<Found> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(offset) = bytes.get(from..).and_then(|b| b.iter().position(|&c| c == b'@')) {
        let at = from + offset;
        from = at + 1;

        let mut start = at;
        while start > 0 && is_local_byte(bytes[start - 1]) {
            start -= 1;
        }
        while start < at && bytes[start] == b'.' {
            start += 1;
        }
        let mut end = at + 1;
        while end < bytes.len() && is_domain_byte(bytes[end]) {
            end += 1;
        }
        while end > at + 1 && matches!(bytes[end - 1], b'.' | b'-') {
            end -= 1;
        }
        if start == at || end <= at + 1 {
            continue;
        }
        // All bytes in start..end are ASCII, so these are char boundaries.
        let (Some(local), Some(domain)) = (text.get(start..at), text.get(at + 1..end)) else {
            continue;
        };
        if !plausible_domain(domain) || (local.starts_with(['/', '=', '?', '&']) && !is_encoded_word(local)) {
            continue;
        }
        if inside_url(bytes, start) {
            continue;
        }
        from = end.max(from);
        out.push(Found { start, end, address: format!("{local}@{domain}").to_ascii_lowercase() });
    }
    out
}

/// An RFC 2047 encoded word (`=?utf-8?B?8J+QiA==?=`) as the whole local
/// part: some mail programs encode a non-ASCII local part as if it were a
/// display name, and the MTAs then report the address exactly so. A leading
/// `=` or `?` otherwise marks a URL parameter, not an address.
fn is_encoded_word(local: &str) -> bool {
    let Some(inner) = local.strip_prefix("=?").and_then(|l| l.strip_suffix("?=")) else {
        return false;
    };
    let mut parts = inner.splitn(3, '?');
    let (Some(charset), Some(encoding), Some(text)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !charset.is_empty() && matches!(encoding, "B" | "b" | "Q" | "q") && !text.is_empty() && !text.contains('?')
}

/// A domain needs a dot, no empty labels, and a last label that is not all
/// digits (that would be an IP address or a version number).
fn plausible_domain(domain: &str) -> bool {
    if !domain.contains('.') || domain.starts_with(['.', '-']) || domain.contains("..") {
        return false;
    }
    domain.rsplit('.').next().is_some_and(|tld| tld.len() >= 2 && tld.bytes().any(|b| b.is_ascii_alphabetic()))
}

/// How far back [`inside_url`] looks for the `://` of a link. Bounded so a
/// long run of text without spaces cannot make the scan quadratic.
const MAX_URL_PREFIX: usize = 512;

/// True when the whitespace-delimited word holding `start` contains `://`,
/// i.e. the "address" is a piece of a link.
fn inside_url(bytes: &[u8], start: usize) -> bool {
    let limit = start.saturating_sub(MAX_URL_PREFIX);
    let mut word_start = start;
    while word_start > limit && !bytes[word_start - 1].is_ascii_whitespace() {
        word_start -= 1;
    }
    bytes[word_start..start].windows(3).any(|w| w == b"://")
}

/// The first address in `text`, if any.
pub(crate) fn first(text: &str) -> Option<String> {
    find_all(text).into_iter().next().map(|f| f.address)
}

/// The address of a DSN/ARF address field such as `rfc822; <a@b.example>`:
/// the part after the address-type `;` when there is one.
pub(crate) fn from_typed_field(value: &str) -> Option<String> {
    let after_type = match value.split_once(';') {
        Some((kind, rest)) if kind.trim().len() <= 16 && !kind.contains('@') => rest,
        _ => value,
    };
    first(after_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<String> {
        find_all(text).into_iter().map(|f| f.address).collect()
    }

    #[test]
    fn finds_quoted_bracketed_and_bare() {
        assert_eq!(
            all("<A@Example.org>: \"b@x.example\": c@y.example... and d%e@f.example."),
            ["a@example.org", "b@x.example", "c@y.example", "d%e@f.example"]
        );
    }

    #[test]
    fn skips_urls_ips_and_ids() {
        assert!(all("see https://x.example/?u=a@b.example now").is_empty());
        assert!(all("id <123@mx> and user@[192.0.2.1] and v@1.2.3").is_empty());
    }

    #[test]
    fn encoded_word_local_part() {
        assert_eq!(
            all("<<< 550 5.1.1 <=?utf-8?B?8J+QiPCfkIg=?=@example.org>... User unknown"),
            ["=?utf-8?b?8j+qipcfkig=?=@example.org"]
        );
        assert!(all("see ?a=b@example.org =?utf-8?X?y?=@example.org").is_empty());
    }

    #[test]
    fn typed_field() {
        assert_eq!(from_typed_field("rfc822; <User@Example.JP>").as_deref(), Some("user@example.jp"));
        assert_eq!(from_typed_field("x400; no address"), None);
    }
}
