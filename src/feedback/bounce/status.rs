//! SMTP codes in text, and the hard/soft decision.
//!
//! Two kinds of code matter: the RFC 3463 enhanced status code (`5.1.1`),
//! which says *what* failed, and the RFC 5321 reply code (`550`), which only
//! says permanent or temporary. Neither alone is enough to decide whether to
//! stop mailing an address: servers answer `550 5.1.1` for spam blocks and
//! `550 5.7.1` for unknown users. So [`classify`] reads the words first and
//! falls back on the codes, the way a postmaster would, and it also weighs
//! the SMTP command the refusal answered ([`smtp_stage`]).

mod verdict;
pub(crate) use verdict::{classify, classify_in_context, gave_up_on_missing_mailbox};

/// Byte that may not directly precede a code: a code glued to a word, a
/// digit or a dot is part of something else (a version, an IP address).
fn blocks_code_start(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'/'
}

/// Reads `digits` starting at `i` (1..=max digits); returns the end index.
fn digits(bytes: &[u8], i: usize, max: usize) -> Option<usize> {
    let mut end = i;
    while end < bytes.len() && bytes[end].is_ascii_digit() && end - i < max {
        end += 1;
    }
    (end > i && bytes.get(end).is_none_or(|b| !b.is_ascii_digit())).then_some(end)
}

/// Every RFC 3463 enhanced status code (`class.subject.detail`, class 2, 4
/// or 5) in `text`, with its byte offset, in order.
///
/// A dotted number that is part of something longer (`192.0.2.153`,
/// `4.8.5.36`) is not a code.
pub(crate) fn find_statuses(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if !matches!(b, b'2' | b'4' | b'5') || (i > 0 && blocks_code_start(bytes[i - 1])) {
            continue;
        }
        if bytes.get(i + 1) != Some(&b'.') {
            continue;
        }
        let Some(subject_end) = digits(bytes, i + 2, 3) else {
            continue;
        };
        if bytes.get(subject_end) != Some(&b'.') {
            continue;
        }
        let Some(detail_end) = digits(bytes, subject_end + 1, 3) else {
            continue;
        };
        let next = bytes.get(detail_end).copied();
        let continues = match next {
            Some(b'.') => bytes.get(detail_end + 1).is_some_and(u8::is_ascii_digit),
            Some(c) => c.is_ascii_alphanumeric() || c == b'_',
            None => false,
        };
        if continues {
            continue;
        }
        if let Some(code) = text.get(i..detail_end) {
            out.push((i, code.to_string()));
        }
    }
    out
}

/// The first enhanced status code in `text`.
pub(crate) fn find_status(text: &str) -> Option<String> {
    find_statuses(text).into_iter().next().map(|(_, c)| c)
}

/// How little a status code says: 2 for `X.0.0` ("something failed"), 1 for
/// `X.Y.0` and `X.4.7` ("delivery time expired", which hides why), 0 for a
/// specific code.
pub(crate) fn vagueness(status: &str) -> u8 {
    if status.ends_with(".0.0") {
        2
    } else if status.ends_with(".0") || status.ends_with(".4.7") {
        1
    } else {
        0
    }
}

/// The most telling status code in `text` and the reply code that goes with
/// it.
///
/// A diagnostic often quotes several codes: the reporting MTA's own summary
/// (`554 4.4.7 Message expired`) and, nested, the remote server's reply
/// (`<421 4.4.2 Connection timed out>`). The least vague one is the real
/// cause; the reply code written just before it is its reply code.
///
/// A session transcript also quotes the successes that came before the
/// failure (`250 2.1.5 Ok` to RCPT TO, then `451 4.3.0` after DATA): a
/// 2.X.X code is only chosen when nothing failed.
pub(crate) fn find_codes(text: &str) -> (Option<String>, Option<u16>) {
    let statuses = find_statuses(text);
    let failed = statuses.iter().any(|(_, code)| !code.starts_with('2'));
    let best = statuses
        .iter()
        .filter(|(_, code)| !failed || !code.starts_with('2'))
        .min_by_key(|(_, code)| vagueness(code))
        .cloned();
    let Some((pos, code)) = best else {
        return (None, find_reply_code(text));
    };
    let reply = reply_before(text, pos).or_else(|| find_reply_code(text));
    (Some(code), reply)
}

/// A reply code directly in front of the status code at `pos`
/// (`550 5.1.1`, `550-5.7.1`, `550-'5.7.1`, `550 #5.1.0`).
fn reply_before(text: &str, pos: usize) -> Option<u16> {
    let before = text.get(..pos)?.trim_end_matches([' ', '-', '\'', '"', '#', '(']);
    let digits = before.get(before.len().checked_sub(3)?..)?;
    let glued =
        before.len().checked_sub(4).and_then(|i| before.as_bytes().get(i)).is_some_and(|b| b.is_ascii_alphanumeric());
    let code: u16 = digits.parse().ok()?;
    (!glued && digits.bytes().all(|b| b.is_ascii_digit()) && valid_reply(code)).then_some(code)
}

/// True for reply codes RFC 5321 can produce: 2yz/4yz/5yz with y in 0..=5.
fn valid_reply(code: u16) -> bool {
    matches!(code / 100, 2 | 4 | 5) && (code / 10) % 10 <= 5
}

/// The first SMTP reply code in `text` that stands where a reply code stands.
///
/// A bare three-digit number is everywhere in a bounce (sizes, ports, times),
/// so a number only counts when it is followed by an enhanced status code
/// (`550 5.1.1`, `550-5.7.26`), or is a 4yz/5yz in the multi-line form
/// (`550-Text`) or that starts a line or follows `:`, `;`, `[`, `(`, `<<<` or
/// `said` and is followed by a space, `-`, `,` or the end.
pub(crate) fn find_reply_code(text: &str) -> Option<u16> {
    let bytes = text.as_bytes();
    let mut fallback = None;
    for (i, &b) in bytes.iter().enumerate() {
        if !matches!(b, b'2' | b'4' | b'5') || (i > 0 && blocks_code_start(bytes[i - 1])) {
            continue;
        }
        if i > 0 && bytes[i - 1] == b'-' {
            continue;
        }
        let Some(end) = digits(bytes, i, 3) else {
            continue;
        };
        if end - i != 3 {
            continue;
        }
        let Some(code) = text.get(i..end).and_then(|s| s.parse::<u16>().ok()) else {
            continue;
        };
        if !valid_reply(code) {
            continue;
        }
        let next = bytes.get(end).copied();
        if !matches!(next, None | Some(b' ' | b'-' | b'\t' | b'\r' | b'\n' | b']' | b')' | b',' | b':')) {
            continue;
        }
        // `550 5.1.1` / `550-5.7.1`: a reply code for certain.
        let after = &bytes[end..];
        let skip = after.iter().take_while(|c| matches!(c, b' ' | b'-' | b'\t')).count();
        let followed_by_status = matches!(next, Some(b' ' | b'-'))
            && find_statuses(text.get(end + skip..(end + skip + 12).min(text.len())).unwrap_or(""))
                .first()
                .is_some_and(|(pos, _)| *pos == 0 || *pos == 1);
        if followed_by_status {
            return Some(code);
        }
        // `550-text` is the multi-line reply form (`550-5.7.1` was taken above).
        let multiline = next == Some(b'-') && bytes.get(end + 1).is_some_and(|c| !c.is_ascii_digit());
        if fallback.is_none() && code >= 400 && (multiline || stands_as_reply(bytes, i)) {
            fallback = Some(code);
        }
    }
    fallback
}

/// Whether the number at `i` is placed like a reply: at a line start or
/// after a separator such as `:`, `;`, `[`, `(`, `<<<` or `said`.
fn stands_as_reply(bytes: &[u8], i: usize) -> bool {
    let mut j = i;
    while j > 0 && matches!(bytes[j - 1], b' ' | b'\t') {
        j -= 1;
    }
    if j == 0 || bytes[j - 1] == b'\n' {
        return true;
    }
    let before = &bytes[j.saturating_sub(4)..j];
    matches!(bytes[j - 1], b':' | b';' | b'[' | b'(' | b'<' | b'=')
        || before.ends_with(b"said")
        || before.ends_with(b"was")
}

/// Chooses between the `Status:` field of a DSN and the code quoted in its
/// diagnostic text.
///
/// The field is what the reporting MTA concluded; the diagnostic is the remote
/// server's own words, often more precise. The field wins unless the quoted
/// code is less vague (see [`vagueness`]): a `5.0.0` field next to a quoted
/// `5.1.1` says less than the quote. When the two disagree on the class
/// (4 vs 5), the one matching the reply code's class is taken.
pub(crate) fn prefer(field: Option<&str>, in_text: Option<&str>, reply: Option<u16>) -> Option<String> {
    let (field, in_text) = match (field, in_text) {
        (None, t) => return t.map(str::to_string),
        (f, None) => return f.map(str::to_string),
        (Some(f), Some(t)) => (f, t),
    };
    let class = |s: &str| s.as_bytes().first().copied();
    if class(field) != class(in_text)
        && let Some(reply) = reply
    {
        let reply_class = b'0' + (reply / 100 % 10) as u8;
        if class(in_text) == Some(reply_class) && class(field) != Some(reply_class) {
            return Some(in_text.to_string());
        }
        return Some(field.to_string());
    }
    if vagueness(in_text) < vagueness(field) {
        return Some(in_text.to_string());
    }
    Some(field.to_string())
}

/// The SMTP command a refusal answered, when the text tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Connection, greeting, HELO/EHLO or MAIL FROM: about the sender.
    Sender,
    Rcpt,
    /// DATA or end of data: about the content.
    Data,
}

/// Reads the SMTP stage from wording such as Postfix's "(in reply to RCPT TO
/// command)", Exim's "after end of data", a `>>> DATA` transcript line or
/// m-FILTER's "SMTP command DATA".
pub(crate) fn smtp_stage(text: &str) -> Option<Stage> {
    let lower = text.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase().replace(['-', '_'], " ");
    const DATA: &[&str] = &["end of data", "reply to data", "after data", ">>> data", "(data)", "smtp command data"];
    const RCPT: &[&str] = &[
        "reply to rcpt",
        "after rcpt",
        ">>> rcpt",
        "rcpt to response",
        "[rcpt to]",
        "following rcpt",
        "smtp command rcpt",
        "smtp:rcpt",
        "our rcpt",
        "rcpt command",
        "like recipient",
    ];
    const SENDER: &[&str] = &[
        "reply to mail from",
        "after mail from",
        ">>> mail from",
        "initial connection",
        "reply to helo",
        "reply to ehlo",
        "after helo",
        "after ehlo",
    ];
    let position = |needles: &[&str]| needles.iter().filter_map(|n| lower.find(n)).min();
    [(position(RCPT), Stage::Rcpt), (position(DATA), Stage::Data), (position(SENDER), Stage::Sender)]
        .into_iter()
        .filter_map(|(pos, stage)| pos.map(|p| (p, stage)))
        .min_by_key(|(p, _)| *p)
        .map(|(_, stage)| stage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feedback::bounce::BounceKind;

    #[test]
    fn statuses_skip_ips_and_versions() {
        let found: Vec<String> =
            find_statuses("host 192.0.2.153 said 550-5.7.26 x (#5.1.1) v4.8.5.36 and 5.2.2; 10.4.4.1 4.4.7.")
                .into_iter()
                .map(|(_, c)| c)
                .collect();
        assert_eq!(found, ["5.7.26", "5.1.1", "5.2.2", "4.4.7"]);
    }

    #[test]
    fn reply_codes_in_context() {
        assert_eq!(find_reply_code("Size (in bytes): 222\nsaid: 550 nope"), Some(550));
        assert_eq!(find_reply_code("id 12345 host said 554 5.7.1 no"), Some(554));
        assert_eq!(find_reply_code("port 25 Thu 2010 no code"), None);
        assert_eq!(find_reply_code("571 No PTR"), None);
        assert_eq!(find_reply_code("host mx [192.0.2.1]: 550 5.1.1 <a@b.c>"), Some(550));
    }

    #[test]
    fn prefer_specific_code() {
        assert_eq!(prefer(Some("5.0.0"), Some("5.1.1"), Some(550)).as_deref(), Some("5.1.1"));
        assert_eq!(prefer(Some("4.4.7"), Some("4.4.2"), None).as_deref(), Some("4.4.2"));
        assert_eq!(prefer(Some("5.2.2"), Some("5.1.1"), Some(550)).as_deref(), Some("5.2.2"));
        assert_eq!(prefer(Some("5.0.0"), Some("5.1.0"), Some(550)).as_deref(), Some("5.1.0"));
        assert_eq!(prefer(Some("4.0.0"), Some("5.1.1"), Some(550)).as_deref(), Some("5.1.1"));
        assert_eq!(prefer(None, Some("5.1.1"), None).as_deref(), Some("5.1.1"));
    }

    #[test]
    fn codes_pick_the_telling_one() {
        assert_eq!(
            find_codes("554 4.4.7 Message expired: unable to deliver <421 4.4.2 Connection timed out>"),
            (Some("4.4.2".into()), Some(421))
        );
        assert_eq!(
            find_codes("5.1.0 - Unknown address error 550-'5.7.1 <x@y.example>... Access denied'"),
            (Some("5.7.1".into()), Some(550))
        );
        assert_eq!(find_codes("550 #5.1.0 Address rejected."), (Some("5.1.0".into()), Some(550)));
        // A transcript's earlier successes are not the outcome.
        assert_eq!(
            find_codes(
                "In:  RCPT TO:<a@b.example>\nOut: 250 2.1.5 Ok\nIn:  DATA\nOut: 451 4.3.0 Error: queue file write error"
            ),
            (Some("4.3.0".into()), Some(451))
        );
        assert_eq!(find_codes("250 2.1.5 Ok"), (Some("2.1.5".into()), Some(250)));
    }

    #[test]
    fn stages() {
        assert_eq!(smtp_stage("550 unknown user (in reply to end of DATA command)"), Some(Stage::Data));
        assert_eq!(smtp_stage("User Unknown (in reply to RCPT TO\n    command)"), Some(Stage::Rcpt));
        assert_eq!(smtp_stage("-------SMTP command\nDATA\n"), Some(Stage::Data));
        assert_eq!(smtp_stage("after MAIL FROM:<a@b.c> SIZE=1: 550 no"), Some(Stage::Sender));
        assert_eq!(classify(None, Some(550), "550 Unknown user", Some(Stage::Data)), BounceKind::Soft);
        assert_eq!(classify(Some("5.1.1"), Some(550), "550 5.1.1 Unknown user", Some(Stage::Data)), BounceKind::Hard);
    }

    #[test]
    fn classify_words_over_codes() {
        assert_eq!(classify(Some("5.1.1"), Some(550), "User unknown", None), BounceKind::Hard);
        assert_eq!(classify(Some("5.1.1"), Some(552), "mailbox is over quota (#5.1.1)", None), BounceKind::Soft);
        // Stock "no such user" wording needs the RCPT stage or a 5.1.x code...
        assert_eq!(classify(Some("5.7.1"), Some(553), "no such user here", None), BounceKind::Soft);
        assert_eq!(classify(Some("5.7.1"), Some(553), "no such user here", Some(Stage::Rcpt)), BounceKind::Hard);
        // ...an explicit failed lookup does not, unless the code says the
        // mailbox exists (X.2.Y).
        assert_eq!(classify(Some("5.0.0"), Some(550), "mailbox does not exist", None), BounceKind::Hard);
        assert_eq!(classify(Some("5.2.1"), Some(550), "Invalid Address", None), BounceKind::Soft);
        assert_eq!(classify(Some("4.2.2"), Some(450), "try later", None), BounceKind::Soft);
        assert_eq!(classify(None, None, "Host unknown", None), BounceKind::Hard);
    }

    #[test]
    fn a_failed_4_1_1_about_the_mailbox() {
        let postfix = "450 4.1.1 <kiji@example.org>: Recipient address rejected: User unknown in virtual alias table";
        assert!(gave_up_on_missing_mailbox(Some("4.1.1"), postfix));
        assert!(!gave_up_on_missing_mailbox(Some("4.1.1"), "451 4.1.1 temporary lookup failure"));
        assert!(!gave_up_on_missing_mailbox(
            Some("4.1.1"),
            "450 4.1.1 <kiji@example.org>: Recipient address rejected: Greylisted"
        ));
        assert!(!gave_up_on_missing_mailbox(Some("4.2.2"), "450 4.2.2 mailbox unavailable"));
    }

    #[test]
    fn user_unknown_naming_the_refused_address() {
        // The reply echoes the recipient before the stock phrase: an answer
        // to RCPT TO, even when the report does not say so.
        assert_eq!(classify(None, Some(550), "550 <kiji@example.jp>: User unknown", None), BounceKind::Hard);
        assert_eq!(classify(None, Some(550), "550: <kiji@example.jp>: User unknown", None), BounceKind::Hard);
        assert_eq!(classify(Some("5.0.0"), Some(550), "550 <kiji@example.jp>... User unknown", None), BounceKind::Hard);
        assert_eq!(classify(Some("5.0.0"), Some(550), "550 kiji@example.jp... No such user", None), BounceKind::Soft);
        // Not the shape: no address, an address elsewhere, a 4xx reply, no
        // reply code, or a refusal after DATA.
        assert_eq!(classify(None, Some(550), "550 User unknown", None), BounceKind::Soft);
        assert_eq!(
            classify(None, Some(550), "<kiji@example.jp> 550 spam filter: user unknown", None),
            BounceKind::Soft
        );
        assert_eq!(classify(None, Some(450), "450 <kiji@example.jp>: User unknown", None), BounceKind::Soft);
        assert_eq!(classify(None, None, "<kiji@example.jp>: User unknown", None), BounceKind::Soft);
        assert_eq!(classify(None, Some(550), "550 <kiji@example.jp> no such user here", None), BounceKind::Soft);
        assert_eq!(classify(None, Some(550), "550 filter said: user unknown", None), BounceKind::Soft);
        assert_eq!(classify(None, Some(550), "550 (kiji@example.jp): user unknown", None), BounceKind::Soft);
        assert_eq!(
            classify(Some("5.2.1"), Some(550), "550 5.2.1 <kiji@example.jp>... User Unknown", None),
            BounceKind::Soft
        );
        assert_eq!(
            classify(None, Some(550), "550 <kiji@example.jp>: User unknown", Some(Stage::Data)),
            BounceKind::Soft
        );
        assert_eq!(find_reply_code("550: <kiji@example.jp>: User unknown"), Some(550));
    }
}
