//! What an escalation follow-up needs to know about its original inbox
//! message: whether it was delivered, when, and whether it was seen or read.

use async_trait::async_trait;
use sqlx::Row;

use super::json_rows::keys_json;
use super::queries::Query;
use super::rows::text;
use super::rows::{Fetch, Run};
use super::{NewOutboxRow, OutboxRow, SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::OutboxStatus;

/// An original inbox message, as a follow-up sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginalState {
    pub outbox_id: String,
    pub status: OutboxStatus,
    /// When the inbox message was written (`None`: not delivered, or erased).
    pub delivered_at: Option<Millis>,
    pub seen_at: Option<Millis>,
    pub read_at: Option<Millis>,
}

#[async_trait]
pub trait EscalationStore: Send + Sync {
    /// The state of these outbox rows (those that exist) and their inbox
    /// messages, in one query.
    async fn original_states(&self, outbox_ids: &[&str]) -> Result<Vec<OriginalState>, StoreError>;

    /// Up to `limit` messages whose follow-up fell due by `now`, earliest
    /// first, with when it fell due.
    async fn due_follow_ups(&self, now: Millis, limit: u32) -> Result<Vec<(OutboxRow, Millis)>, StoreError>;

    /// In one transaction: inserts the follow-up rows (a dedupe key that
    /// exists already plans nothing: another instance got there first) and
    /// marks `originals` as having had their follow-up planned.
    async fn plan_follow_ups(&self, rows: &[NewOutboxRow], originals: &[&str], now: Millis) -> Result<(), StoreError>;
}

#[async_trait]
impl EscalationStore for SqlStore {
    async fn original_states(&self, outbox_ids: &[&str]) -> Result<Vec<OriginalState>, StoreError> {
        let rows = self.read_by_keys(Query::OriginalStates, outbox_ids, "escalation originals").await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let read = || -> Result<(String, String, Option<i64>, Option<i64>, Option<i64>), sqlx::Error> {
                Ok((
                    text(r, "id")?,
                    text(r, "status")?,
                    r.try_get("delivered_at")?,
                    r.try_get("seen_at")?,
                    r.try_get("read_at")?,
                ))
            };
            let (id, status, delivered, seen, read_at) = read().map_err(StoreError::db("escalation originals"))?;
            let status = status.parse().map_err(|_| StoreError::CorruptRow {
                table: "engagement_outbox",
                column: "status",
                value: status.clone(),
            })?;
            out.push(OriginalState {
                outbox_id: id,
                status,
                delivered_at: delivered.map(Millis),
                seen_at: seen.map(Millis),
                read_at: read_at.map(Millis),
            });
        }
        Ok(out)
    }
    async fn due_follow_ups(&self, now: Millis, limit: u32) -> Result<Vec<(OutboxRow, Millis)>, StoreError> {
        let rows = sqlx::query(self.sql(Query::DueFollowUps))
            .bind(now.0)
            .bind(i64::from(limit))
            .all(self.pool(), "due follow-ups")
            .await?;
        rows.iter()
            .map(|r| {
                let at: i64 = r.try_get("follow_up_at").map_err(StoreError::db("due follow-ups"))?;
                Ok((OutboxRow::from_any(r)?, Millis(at)))
            })
            .collect()
    }

    async fn plan_follow_ups(&self, rows: &[NewOutboxRow], originals: &[&str], now: Millis) -> Result<(), StoreError> {
        if originals.is_empty() {
            return Ok(());
        }
        let d = self.dialect();
        let db = StoreError::db;
        let mut tx = self.begin_write().await.map_err(db("plan follow-ups: begin"))?;
        super::outbox::insert(&mut tx, d, rows, false, now).await?;
        sqlx::query(self.sql(Query::ClearFollowUps))
            .bind(keys_json(originals.iter().copied())?)
            .run(&mut *tx, "plan follow-ups: mark originals")
            .await?;
        tx.commit().await.map_err(db("plan follow-ups: commit"))?;
        Ok(())
    }
}
