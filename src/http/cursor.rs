//! A list's `cursor`: the `next_cursor` a previous page handed out.
//!
//! Pages are keyed on row ids (UUIDs), so a cursor is one, parsed at the
//! edge. Taken as any text, a malformed cursor was compared with the ids as
//! it stood: `/v1/outbox?cursor=zzz` answered the first page (every id sorts
//! below `z`), `/v1/inbox?cursor=x` an empty one, and a client with a
//! mangled cursor silently looped or stopped. Refused, it is a `422` naming
//! `cursor` (through [`super::extract::ApiQuery`]). The topic lists are
//! keyed on text the host chose (topic keys, user ids), so their cursor is
//! checked as one of those instead (`super::topics::PageQuery`).

use serde::{Deserialize, Deserializer};

/// A page cursor: a row id as `next_cursor` gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor(String);

impl Cursor {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// What a cursor may look like, for the message and the OpenAPI document.
pub const CURSOR_FORMAT: &str =
    "the next_cursor of a previous page (a UUID such as 0192c5c8-41a1-7c3b-9d2e-5f8a1b2c3d4e)";

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        // Hyphenated and lower case, as the ids are stored and handed out:
        // the other forms `Uuid::try_parse` reads (simple, braced, upper
        // case) would be compared as text and match no row.
        match uuid::Uuid::try_parse(&text) {
            Ok(id) if id.hyphenated().to_string() == text => Ok(Cursor(text)),
            _ => Err(serde::de::Error::custom(format!("must be {CURSOR_FORMAT}"))),
        }
    }
}

/// The `next_cursor` of a page of `rows` asked for with `limit`: the last
/// row's key when the page is full (there may be more), none when it is
/// not (this was the last page).
pub fn next_key<T>(rows: &[T], limit: u32, key: impl Fn(&T) -> &str) -> Option<String> {
    if rows.len() as u32 == limit { rows.last().map(|r| key(r).to_owned()) } else { None }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn only_an_id_is_a_cursor() {
        let ok: Cursor = serde_json::from_str("\"0192c5c8-41a1-7c3b-9d2e-5f8a1b2c3d4e\"").unwrap();
        assert_eq!(ok.as_str(), "0192c5c8-41a1-7c3b-9d2e-5f8a1b2c3d4e");
        for bad in [
            "\"zzz\"",
            "\"\"",
            "\"0192C5C8-41A1-7C3B-9D2E-5F8A1B2C3D4E\"",
            "\"0192c5c841a17c3b9d2e5f8a1b2c3d4e\"",
            "\"{0192c5c8-41a1-7c3b-9d2e-5f8a1b2c3d4e}\"",
        ] {
            let e = serde_json::from_str::<Cursor>(bad).unwrap_err().to_string();
            assert!(e.contains("next_cursor"), "{bad}: {e}");
        }
    }
}
