//! Operator actions on outbox rows: list with filters, retry, cancel.

use async_trait::async_trait;

use super::rows::{Fetch, Run};
use super::rows::{IN_STATUS_INDEX, OUTBOX_COLUMNS};
use super::{CancelScope, OutboxRow, RuleStore, SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::OutboxStatus;

/// Filters for listing the outbox; all optional. Pages go backwards in time:
/// `before` is the last id of the previous page (ids are UUIDv7, so they sort
/// by creation).
#[derive(Debug, Clone, Default)]
pub struct OutboxFilter {
    pub status: Option<OutboxStatus>,
    pub user_id: Option<String>,
    pub rule_id: Option<String>,
    pub before: Option<String>,
    pub limit: u32,
}

/// What an operator's retry or cancel came to.
#[derive(Debug, Clone)]
pub enum RowAction {
    Done(Box<OutboxRow>),
    NotFound,
    /// The row is in a status that does not allow it; the current row.
    Refused(Box<OutboxRow>),
}

#[async_trait]
pub trait OutboxAdmin: Send + Sync {
    async fn list_outbox(&self, filter: &OutboxFilter) -> Result<Vec<OutboxRow>, StoreError>;
    /// Schedules a row again, due now, with its attempts and expiry reset:
    /// a `scheduled` row is brought forward; a `failed`, `expired`,
    /// `cancelled` or `suppressed` one is given a fresh start (the send log
    /// keeps its earlier outcome). `sent` and `sending` rows are refused.
    async fn retry_outbox(&self, id: &str, now: Millis) -> Result<RowAction, StoreError>;
    /// [`retry_outbox`](OutboxAdmin::retry_outbox) for many rows in one
    /// statement (the operator screen's "retry all matching"): how many were
    /// scheduled again. Rows no longer in a retryable status are left alone.
    async fn retry_many(&self, ids: &[String], now: Millis) -> Result<u64, StoreError>;
    /// Cancels a `scheduled` row with a send-log row saying `detail`.
    async fn cancel_outbox(&self, id: &str, detail: &str, now: Millis) -> Result<RowAction, StoreError>;
    /// Send-log rows written since `since`, by status: recent throughput.
    async fn send_counts_since(&self, since: Millis) -> Result<Vec<(String, i64)>, StoreError>;
}

/// The operator screen's list: the statement (with `?` marks) and its
/// binds; the limit is bound after them.
pub(super) fn list_outbox_sql(f: &OutboxFilter) -> (String, Vec<String>) {
    // The operator screen's filters: any combination of six, built per request.
    let mut sql = format!("SELECT {OUTBOX_COLUMNS} FROM engagement_outbox WHERE 1 = 1");
    let mut binds: Vec<String> = Vec::new();
    if let Some(s) = f.status {
        sql.push_str(" AND status = ?");
        binds.push(s.as_str().to_owned());
        // `sent` rows are found on the primary key, the rest on the
        // status index (see IN_STATUS_INDEX).
        if s != OutboxStatus::Sent {
            sql.push_str(&format!(" AND {IN_STATUS_INDEX}"));
        }
    }
    if let Some(u) = &f.user_id {
        sql.push_str(" AND user_id = ?");
        binds.push(u.clone());
    }
    if let Some(r) = &f.rule_id {
        sql.push_str(" AND rule_id = ?");
        binds.push(r.clone());
    }
    if let Some(b) = &f.before {
        sql.push_str(" AND id < ?");
        binds.push(b.clone());
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    (sql, binds)
}

#[async_trait]
impl OutboxAdmin for SqlStore {
    async fn list_outbox(&self, f: &OutboxFilter) -> Result<Vec<OutboxRow>, StoreError> {
        let (sql, binds) = list_outbox_sql(f);
        let sql = self.dialect().sql(&sql);
        let mut q = sqlx::query(&sql);
        for b in binds {
            q = q.bind(b);
        }
        let rows = q.bind(i64::from(f.limit)).all(self.pool(), "list outbox").await?;
        rows.iter().map(OutboxRow::from_any).collect()
    }

    async fn retry_outbox(&self, id: &str, now: Millis) -> Result<RowAction, StoreError> {
        let sql = self.dialect().sql(
            "UPDATE engagement_outbox SET status = 'scheduled', due_at = ?, expires_at = NULL, attempts = 0, \
             claim_token = NULL, claimed_at = NULL, updated_at = ? \
             WHERE id = ? AND status IN ('scheduled', 'failed', 'expired', 'cancelled', 'suppressed')",
        );
        let n = sqlx::query(&sql)
            .bind(now.0)
            .bind(now.0)
            .bind(id.to_owned())
            .run(self.writer(), "retry outbox row")
            .await?;
        let row = self.get_outbox(id).await?;
        Ok(match (n, row) {
            (_, None) => RowAction::NotFound,
            (1, Some(row)) => {
                self.signal_enqueued().await;
                RowAction::Done(Box::new(row))
            }
            (_, Some(row)) => RowAction::Refused(Box::new(row)),
        })
    }

    async fn retry_many(&self, ids: &[String], now: Millis) -> Result<u64, StoreError> {
        let mut total = 0;
        // Chunks keep the statement under every dialect's bind limit.
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            // One `?` per id of the chunk: the list's length varies.
            let sql = self.dialect().sql(&format!(
                "UPDATE engagement_outbox SET status = 'scheduled', due_at = ?, expires_at = NULL, attempts = 0, \
                 claim_token = NULL, claimed_at = NULL, updated_at = ? \
                 WHERE id IN ({marks}) AND status IN ('failed', 'expired', 'cancelled', 'suppressed')"
            ));
            let mut q = sqlx::query(&sql).bind(now.0).bind(now.0);
            for id in chunk {
                q = q.bind(id.clone());
            }
            total += q.run(self.pool(), "retry outbox rows").await?;
        }
        if total > 0 {
            self.signal_enqueued().await;
        }
        Ok(total)
    }

    async fn send_counts_since(&self, since: Millis) -> Result<Vec<(String, i64)>, StoreError> {
        // Send-log ids are UUIDv7 made from the same clock as `created_at`
        // (see `sends`), so the primary key range is the time range.
        let sql = self
            .dialect()
            .sql("SELECT status, COUNT(*) AS n FROM engagement_sends WHERE id >= ? GROUP BY status ORDER BY status");
        let rows = sqlx::query(&sql).bind(super::first_id_at(since)).all(self.pool(), "send counts").await?;
        rows.iter()
            .map(|r| Ok((super::rows::text(r, "status")?, sqlx::Row::try_get::<i64, _>(r, "n")?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("send counts"))
    }

    async fn cancel_outbox(&self, id: &str, detail: &str, now: Millis) -> Result<RowAction, StoreError> {
        let n = self.cancel_scheduled(CancelScope::Row(id), detail, now).await?;
        let row = self.get_outbox(id).await?;
        Ok(match (n, row) {
            (_, None) => RowAction::NotFound,
            (1, Some(row)) => RowAction::Done(Box::new(row)),
            (_, Some(row)) => RowAction::Refused(Box::new(row)),
        })
    }
}
