//! `engagement_triggers`: what happened to a user, and what the planner made
//! of it.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::json_rows::keys_json;
use super::rows::{OUTBOX_COLUMNS, opt_text, text};
use super::{Enqueued, NewOutboxRow, OutboxRow, SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::UserId;

/// A trigger to record. `id` is chosen by the caller.
#[derive(Debug, Clone)]
pub struct NewTrigger {
    pub id: String,
    pub trigger_type: String,
    pub user_id: UserId,
    pub payload: serde_json::Value,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request, so a reused idempotency key with a different
    /// body can be told apart from a replay.
    pub request_hash: Option<String>,
    pub occurred_at: Millis,
}

#[derive(Debug, Clone, Serialize)]
pub struct TriggerRow {
    pub id: String,
    #[serde(rename = "type")]
    pub trigger_type: String,
    pub user_id: String,
    pub payload: serde_json::Value,
    pub idempotency_key: Option<String>,
    #[serde(skip)]
    pub request_hash: Option<String>,
    pub occurred_at: Millis,
    pub created_at: Millis,
    /// When the planner handled it; `None` while it waits.
    pub planned_at: Option<Millis>,
    pub planned_count: Option<i64>,
    /// Why it planned what it did, in words ("no enabled rule matches …").
    pub plan_detail: Option<String>,
}

impl NewTrigger {
    /// The row as stored once inserted, before any planner has seen it.
    pub fn unplanned_row(&self, created_at: Millis) -> TriggerRow {
        TriggerRow {
            id: self.id.clone(),
            trigger_type: self.trigger_type.clone(),
            user_id: self.user_id.as_str().to_owned(),
            payload: self.payload.clone(),
            idempotency_key: self.idempotency_key.clone(),
            request_hash: self.request_hash.clone(),
            occurred_at: self.occurred_at,
            created_at,
            planned_at: None,
            planned_count: None,
            plan_detail: None,
        }
    }
}

impl TriggerRow {
    fn from_any(row: &AnyRow) -> Result<TriggerRow, sqlx::Error> {
        let payload = text(row, "payload")?;
        Ok(TriggerRow {
            id: text(row, "id")?,
            trigger_type: text(row, "type")?,
            user_id: text(row, "user_id")?,
            // A host application writes this column itself; a value that is
            // not JSON is kept as a string rather than losing the trigger.
            payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::String(payload)),
            idempotency_key: opt_text(row, "idempotency_key")?,
            request_hash: opt_text(row, "request_hash")?,
            occurred_at: Millis(row.try_get("occurred_at")?),
            created_at: Millis(row.try_get("created_at")?),
            planned_at: row.try_get::<Option<i64>, _>("planned_at")?.map(Millis),
            planned_count: row.try_get("planned_count")?,
            plan_detail: opt_text(row, "plan_detail")?,
        })
    }
}

/// What `insert_trigger` found.
#[derive(Debug, Clone)]
pub enum TriggerInsert {
    Created,
    /// The idempotency key was used before; this is the first trigger.
    Existing(Box<TriggerRow>),
}

const TRIGGER_COLUMNS: &str = "id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at, \
     planned_at, planned_count, plan_detail";

#[async_trait]
pub trait TriggerStore: Send + Sync {
    async fn insert_trigger(&self, t: &NewTrigger, now: Millis) -> Result<TriggerInsert, StoreError>;
    async fn get_trigger(&self, id: &str) -> Result<Option<TriggerRow>, StoreError>;
    /// When each of these triggers happened (those that exist), in one query.
    async fn trigger_times(&self, ids: &[&str]) -> Result<Vec<(String, Millis)>, StoreError>;
    /// Triggers the planner has not handled, oldest first.
    async fn unplanned_triggers(&self, limit: u32) -> Result<Vec<TriggerRow>, StoreError>;
    /// Inserts the planned rows and marks the trigger planned, in one
    /// transaction. `None` when another planner got there first (nothing is
    /// written); otherwise what became of each row (a row whose dedupe key
    /// existed is reported, not doubled).
    async fn plan_trigger(
        &self,
        trigger_id: &str,
        rows: &[NewOutboxRow],
        detail: &str,
        now: Millis,
    ) -> Result<Option<Vec<Enqueued>>, StoreError>;
    async fn outbox_for_trigger(&self, trigger_id: &str) -> Result<Vec<OutboxRow>, StoreError>;
    /// The most recent triggers of a type, newest first (rule previews).
    async fn recent_triggers(&self, trigger_type: &str, limit: u32) -> Result<Vec<TriggerRow>, StoreError>;
    /// A user's triggers, newest first.
    async fn triggers_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<TriggerRow>, StoreError>;
}

fn triggers(rows: &[AnyRow], op: &'static str) -> Result<Vec<TriggerRow>, StoreError> {
    rows.iter().map(|r| TriggerRow::from_any(r).map_err(StoreError::db(op))).collect()
}

#[async_trait]
impl TriggerStore for SqlStore {
    async fn insert_trigger(&self, t: &NewTrigger, now: Millis) -> Result<TriggerInsert, StoreError> {
        let d = self.dialect();
        let sql = d.sql(&format!(
            "INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, \
             created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?){}",
            d.on_conflict_do_nothing("idempotency_key")
        ));
        sqlx::query(&sql)
            .bind(t.id.clone())
            .bind(t.trigger_type.clone())
            .bind(t.user_id.as_str().to_owned())
            .bind(t.payload.to_string())
            .bind(t.idempotency_key.clone())
            .bind(t.request_hash.clone())
            .bind(t.occurred_at.0)
            .bind(now.0)
            .execute(self.writer())
            .await
            .map_err(StoreError::db("insert trigger"))?;
        let Some(key) = &t.idempotency_key else { return Ok(TriggerInsert::Created) };
        // Which trigger holds the key? Ours, or the first one.
        let sql = d.sql(&format!("SELECT {TRIGGER_COLUMNS} FROM engagement_triggers WHERE idempotency_key = ?"));
        let row = sqlx::query(&sql)
            .bind(key.clone())
            .fetch_one(self.pool())
            .await
            .map_err(StoreError::db("insert trigger: read back"))?;
        let holder = TriggerRow::from_any(&row).map_err(StoreError::db("insert trigger: read back"))?;
        Ok(if holder.id == t.id { TriggerInsert::Created } else { TriggerInsert::Existing(Box::new(holder)) })
    }

    async fn get_trigger(&self, id: &str) -> Result<Option<TriggerRow>, StoreError> {
        let sql = self.dialect().sql(&format!("SELECT {TRIGGER_COLUMNS} FROM engagement_triggers WHERE id = ?"));
        let row = sqlx::query(&sql)
            .bind(id.to_owned())
            .fetch_optional(self.pool())
            .await
            .map_err(StoreError::db("get trigger"))?;
        row.map(|r| TriggerRow::from_any(&r).map_err(StoreError::db("get trigger"))).transpose()
    }

    async fn trigger_times(&self, ids: &[&str]) -> Result<Vec<(String, Millis)>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = self.dialect().select_by_keys("t.id, t.occurred_at", "engagement_triggers", "t", "id");
        let rows = sqlx::query(&sql)
            .bind(keys_json(ids.iter().copied())?)
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("trigger times"))?;
        rows.iter()
            .map(|r| Ok((text(r, "id")?, Millis(r.try_get("occurred_at")?))))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("trigger times"))
    }

    async fn unplanned_triggers(&self, limit: u32) -> Result<Vec<TriggerRow>, StoreError> {
        let sql = self.dialect().sql(&format!(
            "SELECT {TRIGGER_COLUMNS} FROM engagement_triggers WHERE planned_at IS NULL ORDER BY created_at LIMIT ?"
        ));
        let rows = sqlx::query(&sql)
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("unplanned triggers"))?;
        triggers(&rows, "unplanned triggers")
    }

    async fn plan_trigger(
        &self,
        trigger_id: &str,
        rows: &[NewOutboxRow],
        detail: &str,
        now: Millis,
    ) -> Result<Option<Vec<Enqueued>>, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let mut tx = self.pool().begin().await.map_err(db("plan trigger: begin"))?;
        // Mark first: the compare-and-set on planned_at decides which planner
        // owns this trigger, and the loser writes nothing.
        let mark = d.sql(
            "UPDATE engagement_triggers SET planned_at = ?, planned_count = ?, plan_detail = ? \
             WHERE id = ? AND planned_at IS NULL",
        );
        let won = sqlx::query(&mark)
            .bind(now.0)
            .bind(rows.len() as i64)
            .bind(detail.to_owned())
            .bind(trigger_id.to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("plan trigger: mark"))?
            .rows_affected();
        if won != 1 {
            tx.rollback().await.map_err(db("plan trigger: rollback"))?;
            return Ok(None);
        }
        let enqueued = self.enqueue_on(&mut tx, rows, now).await?;
        tx.commit().await.map_err(db("plan trigger: commit"))?;
        if enqueued.iter().any(|e| e.created) {
            self.signal_enqueued().await;
        }
        Ok(Some(enqueued))
    }

    async fn outbox_for_trigger(&self, trigger_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        let sql = self
            .dialect()
            .sql(&format!("SELECT {OUTBOX_COLUMNS} FROM engagement_outbox WHERE trigger_id = ? ORDER BY id"));
        let rows = sqlx::query(&sql)
            .bind(trigger_id.to_owned())
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("outbox rows for trigger"))?;
        rows.iter().map(OutboxRow::from_any).collect()
    }

    async fn recent_triggers(&self, trigger_type: &str, limit: u32) -> Result<Vec<TriggerRow>, StoreError> {
        let sql = self.dialect().sql(&format!(
            "SELECT {TRIGGER_COLUMNS} FROM engagement_triggers WHERE type = ? ORDER BY created_at DESC LIMIT ?"
        ));
        let rows = sqlx::query(&sql)
            .bind(trigger_type.to_owned())
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("recent triggers"))?;
        triggers(&rows, "recent triggers")
    }

    async fn triggers_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<TriggerRow>, StoreError> {
        let sql = self.dialect().sql(&format!(
            "SELECT {TRIGGER_COLUMNS} FROM engagement_triggers WHERE user_id = ? ORDER BY created_at DESC LIMIT ?"
        ));
        let rows = sqlx::query(&sql)
            .bind(user_id.as_str().to_owned())
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("triggers for user"))?;
        triggers(&rows, "triggers for user")
    }
}
