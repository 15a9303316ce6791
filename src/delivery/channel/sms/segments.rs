//! How a text travels as SMS: in the GSM 7-bit default alphabet or in
//! UCS-2, and in how many segments (each billed as one message).
//!
//! The rules (3GPP TS 23.038 §6.2.1 for the alphabet and its extension
//! table, TS 23.040 for the concatenation header):
//! - A text whose every character is in the default alphabet or its
//!   extension table goes as GSM-7: 160 septets in one segment, 153 per
//!   segment once it is split (the user data header takes 7). An extension
//!   character (`€ ^ { } [ ] ~ \ |` and form feed) costs two septets, the
//!   escape and the character, and a pair is never split across segments.
//! - Any other character sends the whole text as UCS-2: 70 code units in
//!   one segment, 67 per segment once split. A character outside the Basic
//!   Multilingual Plane (most emoji) is a surrogate pair, two units, kept in
//!   one segment; that is what carriers and Twilio send, strictly UTF-16
//!   rather than UCS-2.
//!
//! National language shift tables (Turkish, Spanish, Portuguese, Indian
//! languages) are not used: few providers let a sender choose them, and
//! counting with them would promise a cheaper encoding than the message
//! gets. The count is therefore the one Twilio's and Kannel's default
//! settings produce.
//!
//! Written here rather than taken from a crate: the `gsm7` crate packs
//! septets for a modem and does not count segments, and no maintained
//! crate that does was found. The tables below are the standard's, and
//! the tests check their sizes and every boundary.

use std::fmt;

/// The GSM 7-bit default alphabet, in table order (0x00 to 0x7F), without
/// 0x1B, the escape to the extension table, which is not a character.
const BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞ\u{1B}ÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
                     ¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";

/// The extension table's characters (each sent as escape + character).
const EXTENSION: &str = "\u{0C}^{}\\[~]|€";

/// Septets in one GSM-7 segment, and per segment of a split message.
pub const GSM7_SINGLE: usize = 160;
pub const GSM7_MULTI: usize = 153;
/// UTF-16 code units in one UCS-2 segment, and per segment once split.
pub const UCS2_SINGLE: usize = 70;
pub const UCS2_MULTI: usize = 67;

/// How a text is encoded on the air.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Gsm7,
    Ucs2,
}

impl Encoding {
    /// `GSM-7` or `UCS-2`, as the preview shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Gsm7 => "GSM-7",
            Encoding::Ucs2 => "UCS-2",
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a text costs as SMS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measure {
    pub encoding: Encoding,
    /// Septets (GSM-7) or UTF-16 code units (UCS-2).
    pub units: usize,
    /// Segments billed. An empty text is one segment: it can be sent, and
    /// is billed.
    pub segments: usize,
}

/// The septets a character takes in GSM-7: 1 in the default alphabet, 2 in
/// the extension table, `None` when GSM-7 cannot carry it.
fn gsm7_septets(c: char) -> Option<usize> {
    if c == '\u{1B}' {
        None
    } else if BASIC.contains(c) {
        Some(1)
    } else if EXTENSION.contains(c) {
        Some(2)
    } else {
        None
    }
}

/// Fills segments of `capacity` units with indivisible pieces of the given
/// widths, in order: a piece that does not fit starts the next segment.
fn pack(widths: impl Iterator<Item = usize>, capacity: usize) -> usize {
    let (mut segments, mut used) = (1, 0);
    for w in widths {
        if used + w > capacity {
            segments += 1;
            used = 0;
        }
        used += w;
    }
    segments
}

/// The encoding, size and segment count of `text`.
pub fn measure(text: &str) -> Measure {
    let gsm: Option<Vec<usize>> = text.chars().map(gsm7_septets).collect();
    let (encoding, widths, single, multi) = match gsm {
        Some(widths) => (Encoding::Gsm7, widths, GSM7_SINGLE, GSM7_MULTI),
        None => (Encoding::Ucs2, text.chars().map(char::len_utf16).collect(), UCS2_SINGLE, UCS2_MULTI),
    };
    let units = widths.iter().sum();
    let segments = if units <= single { 1 } else { pack(widths.into_iter(), multi) };
    Measure { encoding, units, segments }
}

/// The characters of `text` that force UCS-2, each once, in order of
/// appearance: what the preview points at when a text costs more than its
/// author expected (a curly quote pasted from a word processor).
pub fn ucs2_characters(text: &str) -> Vec<char> {
    let mut out = Vec::new();
    for c in text.chars().filter(|c| gsm7_septets(*c).is_none()) {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// `sms.max_segments` when it is not set: three segments (up to 459 GSM-7
/// or 201 UCS-2 characters), past which a text costs more than most
/// senders mean it to and some carriers stop reassembling it.
pub const DEFAULT_MAX_SEGMENTS: usize = 3;

/// A text over the segment limit: what it measures, and the characters that
/// made it UCS-2 if any, so the author can see what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TooManySegments {
    pub measure: Measure,
    pub max: usize,
    pub forcing_ucs2: Vec<char>,
}

impl fmt::Display for TooManySegments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.measure;
        let unit = if m.encoding == Encoding::Gsm7 { "septets" } else { "UTF-16 units" };
        write!(
            f,
            "the text is {} segments of {} ({} {unit}), over the limit of {}",
            m.segments, m.encoding, m.units, self.max
        )?;
        if !self.forcing_ucs2.is_empty() {
            let chars: Vec<String> = self.forcing_ucs2.iter().map(|c| format!("{c:?}")).collect();
            write!(f, "; it is UCS-2 because of {}", chars.join(", "))?;
        }
        Ok(())
    }
}

/// Measures `text` and refuses it over `max` segments (a rule's sample at
/// save, the preview).
pub fn within(text: &str, max: usize) -> Result<Measure, TooManySegments> {
    let m = measure(text);
    if m.segments <= max {
        Ok(m)
    } else {
        Err(TooManySegments { measure: m, max, forcing_ucs2: ucs2_characters(text) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(text: &str) -> (Encoding, usize, usize) {
        let r = measure(text);
        (r.encoding, r.units, r.segments)
    }

    #[test]
    fn the_tables_are_the_standards_size() {
        // 128 positions, less the escape.
        assert_eq!(BASIC.chars().filter(|c| *c != '\u{1B}').count(), 127);
        assert_eq!(EXTENSION.chars().count(), 10);
        assert!(BASIC.chars().all(|c| !EXTENSION.contains(c)));
        // Position checks against the table: 0x00 '@', 0x10 'Δ', 0x24 '¤',
        // 0x40 '¡', 0x5F '§', 0x60 '¿', 0x7F 'à'.
        let at: Vec<char> = BASIC.chars().collect();
        assert_eq!(
            (at[0x00], at[0x10], at[0x24], at[0x40], at[0x5F], at[0x60], at[0x7F]),
            ('@', 'Δ', '¤', '¡', '§', '¿', 'à')
        );
    }

    #[test]
    fn gsm7_boundaries_are_160_and_153() {
        assert_eq!(m(""), (Encoding::Gsm7, 0, 1));
        assert_eq!(m(&"a".repeat(160)), (Encoding::Gsm7, 160, 1));
        assert_eq!(m(&"a".repeat(161)), (Encoding::Gsm7, 161, 2));
        assert_eq!(m(&"a".repeat(306)), (Encoding::Gsm7, 306, 2));
        assert_eq!(m(&"a".repeat(307)), (Encoding::Gsm7, 307, 3));
        assert_eq!(m(&"a".repeat(459)), (Encoding::Gsm7, 459, 3));
    }

    #[test]
    fn extension_characters_count_double() {
        assert_eq!(m("€"), (Encoding::Gsm7, 2, 1));
        assert_eq!(m("^"), (Encoding::Gsm7, 2, 1));
        assert_eq!(m("{}[]~\\|\u{0C}"), (Encoding::Gsm7, 16, 1));
        // 158 + '€' = 160 fits; 159 + '€' = 161 does not.
        assert_eq!(m(&format!("{}€", "a".repeat(158))), (Encoding::Gsm7, 160, 1));
        assert_eq!(m(&format!("{}€", "a".repeat(159))), (Encoding::Gsm7, 161, 2));
        // Accented letters of the default alphabet stay GSM-7 at one septet.
        assert_eq!(m("Ça, éè àù Ññ ÄÖÜ ß"), (Encoding::Gsm7, 18, 1));
    }

    /// Each text measured, with its case named in a failure.
    fn measures(cases: &[(&str, String, (Encoding, usize, usize))]) {
        for (case, text, want) in cases {
            assert_eq!(m(text), *want, "{case}");
        }
    }

    #[test]
    fn an_escape_pair_is_never_split_across_segments() {
        measures(&[
            // 152 septets then '^' (2): the pair does not fit in the first
            // 153, so it opens the second segment.
            ("152 + ^ + 10", format!("{}^{}", "a".repeat(152), "a".repeat(10)), (Encoding::Gsm7, 164, 2)),
            // 306 septets: a plain count says 2 segments (306 = 2 × 153),
            // but the pair cannot close the first, so the text needs a third.
            ("152 + ^ + 152", format!("{}^{}", "a".repeat(152), "a".repeat(152)), (Encoding::Gsm7, 306, 3)),
        ]);
    }

    #[test]
    fn ucs2_boundaries_are_70_and_67() {
        measures(&[
            ("70", "ж".repeat(70), (Encoding::Ucs2, 70, 1)),
            ("71", "ж".repeat(71), (Encoding::Ucs2, 71, 2)),
            ("134", "ж".repeat(134), (Encoding::Ucs2, 134, 2)),
            ("135", "ж".repeat(135), (Encoding::Ucs2, 135, 3)),
        ]);
    }

    #[test]
    fn one_emoji_forces_ucs2_and_counts_as_a_surrogate_pair() {
        measures(&[
            // 159 GSM characters are one segment; add an emoji and the
            // whole text is UCS-2: 159 + 2 units.
            ("159 + emoji", format!("{}🙂", "a".repeat(159)), (Encoding::Ucs2, 161, 3)),
            ("one emoji", "🙂".into(), (Encoding::Ucs2, 2, 1)),
            ("35 emoji", "🙂".repeat(35), (Encoding::Ucs2, 70, 1)),
            ("36 emoji", "🙂".repeat(36), (Encoding::Ucs2, 72, 2)),
            // 66 units then a pair: the pair does not fit in 67 and moves on.
            ("66 + emoji + 5", format!("{}🙂{}", "ж".repeat(66), "ж".repeat(5)), (Encoding::Ucs2, 73, 2)),
            ("66 + emoji + 66", format!("{}🙂{}", "ж".repeat(66), "ж".repeat(66)), (Encoding::Ucs2, 134, 3)),
        ]);
    }

    #[test]
    fn over_the_limit_says_how_far_and_why_it_is_ucs2() {
        assert_eq!(within(&"a".repeat(459), DEFAULT_MAX_SEGMENTS).unwrap().segments, 3);
        let e = within(&"a".repeat(460), DEFAULT_MAX_SEGMENTS).unwrap_err();
        assert_eq!(e.to_string(), "the text is 4 segments of GSM-7 (460 septets), over the limit of 3");
        let e = within(&format!("{}’", "a".repeat(201)), 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the text is 4 segments of UCS-2 (202 UTF-16 units), over the limit of 3; it is UCS-2 because of '’'"
        );
    }

    #[test]
    fn the_characters_that_force_ucs2_are_named_once() {
        assert_eq!(ucs2_characters("It’s “fine” 🙂 ’"), vec!['’', '“', '”', '🙂']);
        assert!(ucs2_characters("plain € text").is_empty());
        // The escape itself is not a character GSM-7 can carry as text.
        assert_eq!(measure("\u{1B}").encoding, Encoding::Ucs2);
    }
}
