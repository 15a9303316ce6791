//! The in-app inbox as its owner sees it: pages, counts, read state, and a
//! signal when it changes (for the live stream).
//!
//! Every query here is scoped by `user_id` in its WHERE clause, not only by
//! message id: a user's token can never read or change another user's
//! messages, even with a guessed id.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use tokio::sync::broadcast;

use super::{InboxMessage, SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::UserId;

/// Which messages a page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InboxFilter {
    /// Everything not archived (the default).
    Inbox,
    /// Not archived and not read.
    Unread,
    /// Archived only.
    Archived,
    /// Everything.
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct InboxCounts {
    /// Not yet seen (shown in a list) and not archived: the badge.
    pub unseen: i64,
    /// Not yet read and not archived.
    pub unread: i64,
}

/// A change to one message's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxMark {
    Seen,
    Read,
    Unread,
    Archive,
}

const INBOX_COLUMNS: &str = "id, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at";

#[async_trait]
pub trait InboxStore: Send + Sync {
    /// A page of a user's messages, newest first; `before` is the last id of
    /// the previous page.
    async fn inbox_page(
        &self,
        user: &UserId,
        filter: InboxFilter,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxMessage>, StoreError>;
    /// Messages newer than `after` (an id), oldest first: what a stream
    /// resuming from `after` has missed.
    async fn inbox_after(
        &self,
        user: &UserId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxMessage>, StoreError>;
    async fn inbox_counts(&self, user: &UserId) -> Result<InboxCounts, StoreError>;
    /// Changes one of the user's messages; `None` if the user has no such
    /// message (whoever else may have it).
    async fn inbox_mark(
        &self,
        user: &UserId,
        id: &str,
        mark: InboxMark,
        now: Millis,
    ) -> Result<Option<InboxMessage>, StoreError>;
    /// Marks every unread, unarchived message read; returns how many.
    async fn inbox_read_all(&self, user: &UserId, now: Millis) -> Result<u64, StoreError>;
    /// User ids whose inbox changed, as they change (in this process, and on
    /// PostgreSQL in every instance).
    fn inbox_changes(&self) -> broadcast::Receiver<String>;
}

#[async_trait]
impl InboxStore for SqlStore {
    async fn inbox_page(
        &self,
        user: &UserId,
        filter: InboxFilter,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxMessage>, StoreError> {
        let mut sql = format!("SELECT {INBOX_COLUMNS} FROM engagement_inbox WHERE user_id = ?");
        sql.push_str(match filter {
            InboxFilter::Inbox => " AND archived_at IS NULL",
            InboxFilter::Unread => " AND archived_at IS NULL AND read_at IS NULL",
            InboxFilter::Archived => " AND archived_at IS NOT NULL",
            InboxFilter::All => "",
        });
        if before.is_some() {
            sql.push_str(" AND id < ?");
        }
        sql.push_str(" ORDER BY id DESC LIMIT ?");
        let sql = self.dialect().sql(&sql);
        let mut q = sqlx::query_as(&sql).bind(user.as_str().to_owned());
        if let Some(b) = before {
            q = q.bind(b.to_owned());
        }
        q.bind(i64::from(limit)).fetch_all(self.pool()).await.map_err(StoreError::db("inbox page"))
    }

    async fn inbox_after(
        &self,
        user: &UserId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxMessage>, StoreError> {
        let sql = self.dialect().sql(&format!(
            "SELECT {INBOX_COLUMNS} FROM engagement_inbox WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?"
        ));
        sqlx::query_as(&sql)
            .bind(user.as_str().to_owned())
            .bind(after.unwrap_or("").to_owned())
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("inbox after"))
    }

    async fn inbox_counts(&self, user: &UserId) -> Result<InboxCounts, StoreError> {
        // COUNT of a CASE, not SUM: SUM is DECIMAL on MySQL and NUMERIC on
        // PostgreSQL, which sqlx's Any driver cannot carry; COUNT is BIGINT
        // everywhere.
        let sql = self.dialect().sql(
            "SELECT COUNT(CASE WHEN seen_at IS NULL THEN 1 END) AS unseen, \
                    COUNT(CASE WHEN read_at IS NULL THEN 1 END) AS unread \
             FROM engagement_inbox WHERE user_id = ? AND archived_at IS NULL",
        );
        let row = sqlx::query(&sql)
            .bind(user.as_str().to_owned())
            .fetch_one(self.pool())
            .await
            .map_err(StoreError::db("inbox counts"))?;
        let get = |col: &str| row.try_get::<i64, _>(col).map_err(StoreError::db("inbox counts"));
        Ok(InboxCounts { unseen: get("unseen")?, unread: get("unread")? })
    }

    async fn inbox_mark(
        &self,
        user: &UserId,
        id: &str,
        mark: InboxMark,
        now: Millis,
    ) -> Result<Option<InboxMessage>, StoreError> {
        // Each statement takes `now` twice; reading or archiving a message
        // also means it was seen. (Not `seen_at = read_at`: MySQL evaluates
        // SET left to right with new values, the others with old ones.)
        let set = match mark {
            InboxMark::Seen => "seen_at = COALESCE(seen_at, ?, ?)",
            InboxMark::Read => "read_at = COALESCE(read_at, ?), seen_at = COALESCE(seen_at, ?)",
            InboxMark::Unread => "read_at = NULL, seen_at = COALESCE(seen_at, ?, ?)",
            InboxMark::Archive => "archived_at = COALESCE(archived_at, ?), seen_at = COALESCE(seen_at, ?)",
        };
        let sql = self.dialect().sql(&format!("UPDATE engagement_inbox SET {set} WHERE id = ? AND user_id = ?"));
        sqlx::query(&sql)
            .bind(now.0)
            .bind(now.0)
            .bind(id.to_owned())
            .bind(user.as_str().to_owned())
            .execute(self.pool())
            .await
            .map_err(StoreError::db("inbox mark"))?;
        let sql =
            self.dialect().sql(&format!("SELECT {INBOX_COLUMNS} FROM engagement_inbox WHERE id = ? AND user_id = ?"));
        let msg: Option<InboxMessage> = sqlx::query_as(&sql)
            .bind(id.to_owned())
            .bind(user.as_str().to_owned())
            .fetch_optional(self.pool())
            .await
            .map_err(StoreError::db("inbox mark: read back"))?;
        if msg.is_some() {
            self.signal_inbox_changed(user.as_str()).await;
        }
        Ok(msg)
    }

    async fn inbox_read_all(&self, user: &UserId, now: Millis) -> Result<u64, StoreError> {
        let sql = self.dialect().sql(
            "UPDATE engagement_inbox SET read_at = ?, seen_at = COALESCE(seen_at, ?) \
             WHERE user_id = ? AND read_at IS NULL AND archived_at IS NULL",
        );
        let n = sqlx::query(&sql)
            .bind(now.0)
            .bind(now.0)
            .bind(user.as_str().to_owned())
            .execute(self.pool())
            .await
            .map_err(StoreError::db("inbox read all"))?
            .rows_affected();
        if n > 0 {
            self.signal_inbox_changed(user.as_str()).await;
        }
        Ok(n)
    }

    fn inbox_changes(&self) -> broadcast::Receiver<String> {
        self.inbox_changed_sender().subscribe()
    }
}
