//! `engagement_events`: what happened, in order, for host applications to
//! follow.
//!
//! Each event is written in the same transaction as the change it reports,
//! so a follower never sees an outcome that was rolled back and never misses
//! one that committed: the table is an outbox of outcomes. (The alternative,
//! posting events to the host as they happen, loses them whenever the host
//! is down; here the host reads from where it left off.)

use async_trait::async_trait;
use serde::Serialize;
use sqlx::{AnyConnection, Row};
use tokio::sync::watch;

use super::rows::{opt_text, text};
use super::{Dialect, SqlStore, Store, StoreError, new_id};
use crate::clock::Millis;

#[derive(Debug, Clone, Serialize)]
pub struct EventRow {
    pub id: String,
    /// `outcome` (a send-log row: sent, failed, suppressed, bounced,
    /// expired, cancelled, complained), `suppression` or `suppression_lifted`.
    pub kind: String,
    pub user_id: Option<String>,
    pub outbox_id: Option<String>,
    pub data: serde_json::Value,
    pub created_at: Millis,
}

/// Appends an event on the caller's connection, inside its transaction.
pub(crate) async fn append(
    conn: &mut AnyConnection,
    d: Dialect,
    kind: &str,
    user_id: Option<&str>,
    outbox_id: Option<&str>,
    data: &serde_json::Value,
    now: Millis,
) -> Result<(), StoreError> {
    let sql = d.sql(
        "INSERT INTO engagement_events (id, kind, user_id, outbox_id, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    sqlx::query(&sql)
        .bind(new_id())
        .bind(kind.to_owned())
        .bind(user_id.map(str::to_owned))
        .bind(outbox_id.map(str::to_owned))
        .bind(data.to_string())
        .bind(now.0)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::db("append event"))?;
    Ok(())
}

#[async_trait]
pub trait EventStore: Send + Sync {
    /// Events after `after` (an event id), oldest first.
    async fn events_after(&self, after: Option<&str>, limit: u32) -> Result<Vec<EventRow>, StoreError>;
    /// The newest event's id: where a follower that wants only new events starts.
    async fn latest_event_id(&self) -> Result<Option<String>, StoreError>;
    /// Changes every time events are appended (in this process, and on
    /// PostgreSQL in every instance).
    fn event_signal(&self) -> watch::Receiver<u64>;
}

#[async_trait]
impl EventStore for SqlStore {
    async fn events_after(&self, after: Option<&str>, limit: u32) -> Result<Vec<EventRow>, StoreError> {
        let sql = self.dialect().sql(
            "SELECT id, kind, user_id, outbox_id, payload, created_at FROM engagement_events \
             WHERE id > ? ORDER BY id LIMIT ?",
        );
        let rows = sqlx::query(&sql)
            .bind(after.unwrap_or("").to_owned())
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("events after"))?;
        rows.iter()
            .map(|r| {
                let payload = text(r, "payload")?;
                Ok(EventRow {
                    id: text(r, "id")?,
                    kind: text(r, "kind")?,
                    user_id: opt_text(r, "user_id")?,
                    outbox_id: opt_text(r, "outbox_id")?,
                    data: serde_json::from_str(&payload).unwrap_or(serde_json::Value::String(payload)),
                    created_at: Millis(r.try_get("created_at")?),
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("events after"))
    }

    async fn latest_event_id(&self) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT MAX(id) AS id FROM engagement_events")
            .fetch_one(self.pool())
            .await
            .map_err(StoreError::db("latest event"))?;
        opt_text(&row, "id").map_err(StoreError::db("latest event"))
    }

    fn event_signal(&self) -> watch::Receiver<u64> {
        self.events_sender().subscribe()
    }
}
