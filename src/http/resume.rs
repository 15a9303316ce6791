//! `Last-Event-ID`: where a reconnecting stream resumes.
//!
//! Both streams (`/v1/events/stream`, `/v1/inbox/stream`) send each event
//! with its position in commit order as its `id` (see `store::positions`),
//! and a client that reconnects sends the last one back. Only what a Herald
//! server hands out is accepted: a position (decimal digits, 0 to
//! 9223372036854775807), or the UUID an older version used as the id.
//! Anything else is a `400` naming the header. Rejected: reading whatever
//! does not parse as "from the beginning", which is what an outside review
//! found (`abc`, `1e3`, `3.0` or a number past i64 replayed the whole
//! retained history): a malformed id comes from a client with a bug, not
//! one that wants everything, and one that does asks for it
//! (`?from=start`). An empty header is no id at all (the SSE specification
//! has clients leave it out when the last id was empty).
//!
//! A position ahead of every position handed out cannot be from this
//! database: the follower saved it from another deployment, or this
//! database was restored from a backup older than the follower's state.
//! Such a stream starts from now ([`Resume::Ahead`]), and the events
//! stream's `ready` event says so. Rejected: waiting for the counter to
//! catch up (what it did), which delivers nothing for as long as that takes
//! and then resumes in the middle of events the follower never saw the
//! start of; and refusing with an error, which a browser's `EventSource`
//! takes as final, leaving the inbox widget without live updates for good
//! (the widget reads the inbox itself when it loads, so from now is all it
//! needs).

use axum::http::HeaderMap;

use super::problem::ApiError;
use crate::store::{EventStore, StoreError};

/// The header, as problems name it.
pub const HEADER: &str = "Last-Event-ID";

/// What a client sent as `Last-Event-ID`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastEventId {
    /// A position, as this version sends it.
    Position(i64),
    /// An event or message id from an older version (a UUID), in the
    /// hyphenated lowercase form those versions stored.
    Legacy(String),
}

/// A `Last-Event-ID` that is neither a position nor an older version's id.
#[derive(Debug, thiserror::Error)]
#[error(
    "{value:?} is not an event id: send back the `id` of the last event received (a whole number from 0 to {max}, \
     or the UUID an older version sent), or no {HEADER} to start afresh",
    max = i64::MAX
)]
pub struct BadLastEventId {
    value: String,
}

impl From<BadLastEventId> for ApiError {
    fn from(e: BadLastEventId) -> Self {
        ApiError::BadHeader { header: HEADER, message: e.to_string() }
    }
}

/// The request's `Last-Event-ID`, if it has one.
pub fn last_event_id(headers: &HeaderMap) -> Result<Option<LastEventId>, BadLastEventId> {
    let Some(raw) = headers.get("last-event-id") else { return Ok(None) };
    let bad = || BadLastEventId { value: String::from_utf8_lossy(raw.as_bytes()).into_owned() };
    let value = raw.to_str().map_err(|_| bad())?.trim();
    if value.is_empty() {
        return Ok(None);
    }
    // Digits only: `str::parse::<i64>` also takes a sign ("+5", "-1").
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<i64>().map(|p| Some(LastEventId::Position(p))).map_err(|_| bad());
    }
    match uuid::Uuid::try_parse(value) {
        Ok(id) => Ok(Some(LastEventId::Legacy(id.hyphenated().to_string()))),
        Err(_) => Err(bad()),
    }
}

/// Where a stream resumes after a position the client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Right after it.
    After(i64),
    /// The position is ahead of the newest one handed out (`newest`): the
    /// stream starts from there, i.e. from now.
    Ahead { requested: i64, newest: i64 },
}

impl Resume {
    /// Checks `position` against the newest position handed out. Only a
    /// position ahead of the counter costs the read: a follower's own
    /// position is at most the newest (it saw that event), so the common
    /// reconnect reads the counter once, like the stream's first page.
    pub async fn check<S: EventStore + ?Sized>(store: &S, position: i64) -> Result<Resume, StoreError> {
        let newest = store.newest_position().await?;
        Ok(if position > newest { Resume::Ahead { requested: position, newest } } else { Resume::After(position) })
    }

    /// The position the stream reads after.
    pub fn start(self) -> i64 {
        match self {
            Resume::After(p) => p,
            Resume::Ahead { newest, .. } => newest,
        }
    }

    /// Why the stream did not resume where asked, for the client.
    pub fn note(self) -> Option<String> {
        match self {
            Resume::After(_) => None,
            Resume::Ahead { requested, newest } => Some(format!(
                "{HEADER} {requested} is ahead of the newest position handed out ({newest}), so it is not from this \
                 database: starting from now"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &str) -> Result<Option<LastEventId>, String> {
        let mut h = HeaderMap::new();
        h.insert("last-event-id", v.parse().unwrap());
        last_event_id(&h).map_err(|e| e.to_string())
    }

    #[test]
    fn only_positions_and_older_versions_ids_are_accepted() {
        assert_eq!(parse("42"), Ok(Some(LastEventId::Position(42))));
        assert_eq!(parse("0"), Ok(Some(LastEventId::Position(0))));
        assert_eq!(parse(&i64::MAX.to_string()), Ok(Some(LastEventId::Position(i64::MAX))));
        assert_eq!(parse(""), Ok(None));
        assert_eq!(
            parse("0192F5E2-7C39-7B3A-9D1E-1234567890AB"),
            Ok(Some(LastEventId::Legacy("0192f5e2-7c39-7b3a-9d1e-1234567890ab".into())))
        );
        for bad in ["abc", "1e3", "3.0", "9223372036854775808", "99999999999999999999", "-1", "+5", "0x10", "4 2"] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains(&format!("{bad:?}")) && err.contains("a whole number from 0 to"), "{err}");
        }
        assert_eq!(last_event_id(&HeaderMap::new()).unwrap(), None);
    }
}
