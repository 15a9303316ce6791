//! `engagement_events`: what happened, in commit order, for host
//! applications to follow.
//!
//! Each event is written in the same transaction as the change it reports,
//! so a follower never sees an outcome that was rolled back and never misses
//! one that committed: the table is an outbox of outcomes. (The alternative,
//! posting events to the host as they happen, loses them whenever the host
//! is down; here the host reads from where it left off.) Followers read by
//! `position`, which is handed out in commit order (see `positions`), so
//! "everything after the last position I saw" never skips an event that
//! committed late.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::{AnyConnection, Row};
use tokio::sync::watch;

use super::json_rows::row_as_array;
use super::queries::Query;
use super::rows::Fetch;
use super::rows::from_columns;
use super::{Dialect, SqlStore, Store, StoreError, new_id};
use crate::clock::Millis;

#[derive(Debug, Clone, Serialize)]
pub struct EventRow {
    pub id: String,
    /// Where the event stands in commit order; what a follower resumes from.
    pub position: i64,
    /// `outcome` (a send-log row: sent, failed, suppressed, bounced,
    /// expired, cancelled, complained, and an SMS delivery report's
    /// delivered or undelivered), `held` (a message put back until
    /// a send window opens, quiet hours end or an escalation's wait is
    /// over; not an outcome), `suppression` or `suppression_lifted`.
    pub kind: String,
    pub user_id: Option<String>,
    pub outbox_id: Option<String>,
    pub data: serde_json::Value,
    pub created_at: Millis,
}

from_columns!(EventRow: id, position, kind, user_id, outbox_id, data = "payload", created_at);

/// An event to append.
#[derive(Debug, Clone)]
pub(crate) struct NewEvent {
    pub kind: &'static str,
    pub user_id: Option<String>,
    pub outbox_id: Option<String>,
    pub data: serde_json::Value,
}

/// Appends events at `first .. first + events.len()` (positions the caller
/// reserved in this transaction) on the caller's connection.
pub(crate) async fn insert(
    conn: &mut AnyConnection,
    d: Dialect,
    events: &[NewEvent],
    first: i64,
    now: Millis,
) -> Result<(), StoreError> {
    let rows = events.iter().zip(first..).map(event_row).collect();
    let queries = (Query::AppendEvents, Query::AppendEventsValues);
    super::values::insert(conn, d, queries, rows, now, "append events").await.map(drop)
}

fn event_row((e, position): (&NewEvent, i64)) -> EventJson<'_> {
    EventJson {
        id: new_id(),
        position,
        kind: e.kind,
        user_id: e.user_id.as_deref(),
        outbox_id: e.outbox_id.as_deref(),
        payload: e.data.to_string(),
    }
}

/// `events` as PostgreSQL's `append_events_and_inbox` reads them: each
/// row's position is its offset from the first position the statement
/// takes.
pub(crate) fn json_at_offsets(events: &[NewEvent]) -> Result<String, StoreError> {
    let rows: Vec<EventJson> = events.iter().zip(0..).map(event_row).collect();
    super::json_rows::to_json(&rows)
}

row_as_array! {
    /// One event as `append_events` reads it (PostgreSQL: one row of its
    /// JSON array) and `append_events_values` binds it.
    #[derive(Debug)]
    struct EventJson<'a> {
        /// A UUIDv7: what a follower may resume from instead of the position.
        id: String,
        /// Where the event stands in commit order (reserved by the caller).
        position: i64,
        /// `outcome`, `held`, `suppression`, … (see [`EventRow::kind`]).
        kind: &'static str,
        /// The user it is about, if any.
        user_id: Option<&'a str>,
        /// The outbox row it is about, if any.
        outbox_id: Option<&'a str>,
        /// The event's JSON, as text.
        payload: String,
    }
}

/// Reserves positions for `events` and appends them: for transactions that
/// write events and nothing else in order. Call it after the transaction's
/// other writes (see `positions`).
pub(crate) async fn append(
    conn: &mut AnyConnection,
    d: Dialect,
    events: &[NewEvent],
    now: Millis,
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let first = super::positions::reserve(&mut *conn, d, events.len()).await?;
    insert(conn, d, events, first, now).await
}

#[async_trait]
pub trait EventStore: Send + Sync {
    /// Events after `position`, oldest first.
    async fn events_after(&self, position: i64, limit: u32) -> Result<Vec<EventRow>, StoreError>;
    /// The newest event's position (0 when there is none): where a follower
    /// that wants only new events starts.
    async fn latest_event_position(&self) -> Result<i64, StoreError>;
    /// The position of the event with this id, for a follower that resumes
    /// with an event id; `None` if no such event is kept.
    async fn event_position(&self, id: &str) -> Result<Option<i64>, StoreError>;
    /// The newest position handed out, to events and inbox messages alike
    /// (0 before the first): a position a client sends back that is
    /// greater was not handed out by this database.
    async fn newest_position(&self) -> Result<i64, StoreError>;
    /// Changes every time events are appended (in this process, and on
    /// PostgreSQL in every instance).
    fn event_signal(&self) -> watch::Receiver<u64>;
}

#[async_trait]
impl EventStore for SqlStore {
    async fn events_after(&self, position: i64, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        sqlx::query_as(self.sql(Query::EventsAfter))
            .bind(position)
            .bind(i64::from(limit))
            .all(self.pool(), "events after")
            .await
    }

    async fn latest_event_position(&self) -> Result<i64, StoreError> {
        let row = sqlx::query(self.sql(Query::LatestEventPosition)).one(self.pool(), "latest event").await?;
        let p: Option<i64> = row.try_get("p").map_err(StoreError::db("latest event"))?;
        Ok(p.unwrap_or(0))
    }

    async fn event_position(&self, id: &str) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(self.sql(Query::EventPosition))
            .bind(id.to_owned())
            .optional(self.pool(), "event position")
            .await?;
        row.map(|r| r.try_get::<i64, _>(0)).transpose().map_err(StoreError::db("event position"))
    }

    async fn newest_position(&self) -> Result<i64, StoreError> {
        super::positions::newest(self.pool(), self.dialect()).await
    }

    fn event_signal(&self) -> watch::Receiver<u64> {
        self.events_sender().subscribe()
    }
}
