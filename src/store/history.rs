//! One user's outbox rows, send log and triggers, read in one snapshot:
//! what `GET /v1/users/{id}/sends`, the operator screen's send log and
//! `herald sends` answer "did they get it" from.
//!
//! Read one after the other, each in its own implicit transaction, the rows
//! and the log could come from either side of a worker's commit (which
//! writes the row's new status and its log entry together): the review
//! found a row `scheduled, attempts 0` whose history already held `sent` in
//! 21 of 450 reads right after a trigger. Here the three reads share one
//! read-only transaction at an isolation level that gives every statement
//! the same snapshot:
//!
//! - PostgreSQL: `REPEATABLE READ` (its default, `READ COMMITTED`, takes a
//!   new snapshot per statement, which is the bug);
//! - MariaDB/MySQL: `REPEATABLE READ` set for the transaction (InnoDB's
//!   default, but a server may be configured otherwise) and `WITH
//!   CONSISTENT SNAPSHOT`, so the snapshot is taken at the start;
//! - SQLite: a deferred `BEGIN` on a reader: in WAL mode a read transaction
//!   sees the database as of its first read until it ends.
//!
//! One statement joining the tables was the alternative: it would repeat
//! each message's columns once per log row, and the three lists have
//! different limits and orders.

use async_trait::async_trait;
use sqlx::{AnyConnection, Connection, Executor};

use super::admin::{OutboxFilter, list_outbox_sql};
use super::queries::Query;
use super::rows::Fetch;
use super::{Dialect, OutboxRow, SendRecord, SqlStore, Store, StoreError, TriggerRow};
use crate::domain::UserId;

/// What one snapshot held for a user, each list newest first.
#[derive(Debug, Clone, Default)]
pub struct UserHistory {
    /// At most `limit` outbox rows.
    pub rows: Vec<OutboxRow>,
    /// At most `2 * limit` send-log rows (a message has a few each).
    pub log: Vec<SendRecord>,
    /// At most `limit` triggers.
    pub triggers: Vec<TriggerRow>,
}

#[async_trait]
pub trait HistoryStore: Send + Sync {
    /// The user's rows, log and triggers as of one moment (see the module).
    async fn user_history(&self, user: &UserId, limit: u32) -> Result<UserHistory, StoreError>;
}

#[async_trait]
impl HistoryStore for SqlStore {
    async fn user_history(&self, user: &UserId, limit: u32) -> Result<UserHistory, StoreError> {
        let mut conn = self.pool().acquire().await.map_err(StoreError::db("user history"))?;
        let begin = match self.dialect() {
            Dialect::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            Dialect::MySql => {
                // Applies to the next transaction on this connection only.
                (&mut *conn)
                    .execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    .await
                    .map_err(StoreError::db("user history"))?;
                "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"
            }
            Dialect::Sqlite => "BEGIN",
        };
        let mut tx = conn.begin_with(begin).await.map_err(StoreError::db("user history"))?;
        let history = read(&mut tx, self.dialect(), user, limit).await?;
        // Read-only: ending it either way releases the snapshot.
        tx.commit().await.map_err(StoreError::db("user history"))?;
        Ok(history)
    }
}

async fn read(conn: &mut AnyConnection, d: Dialect, user: &UserId, limit: u32) -> Result<UserHistory, StoreError> {
    let filter = OutboxFilter { user_id: Some(user.as_str().to_owned()), limit, ..Default::default() };
    let (sql, binds) = list_outbox_sql(&filter);
    let sql = d.sql(&sql);
    let mut q = sqlx::query(&sql);
    for b in binds {
        q = q.bind(b);
    }
    let rows = q.bind(i64::from(limit)).all(&mut *conn, "user history: outbox").await?;
    let rows = rows.iter().map(OutboxRow::from_any).collect::<Result<Vec<_>, _>>()?;

    let log: Vec<SendRecord> = sqlx::query_as(Query::SendsForUser.sql(d))
        .bind(user.as_str().to_owned())
        .bind(i64::from(limit) * 2)
        .all(&mut *conn, "user history: send log")
        .await?;

    let triggers = sqlx::query_as(Query::TriggersForUser.sql(d))
        .bind(user.as_str().to_owned())
        .bind(i64::from(limit))
        .all(&mut *conn, "user history: triggers")
        .await?;
    Ok(UserHistory { rows, log, triggers })
}
