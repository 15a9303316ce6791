//! The in-app inbox as its owner sees it: pages, counts, read state, and a
//! signal when it changes (for the live stream).
//!
//! Every query here is scoped by `user_id` in its WHERE clause, not only by
//! message id: a user's token can never read or change another user's
//! messages, even with a guessed id.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::{AnyConnection, Row};
use tokio::sync::broadcast;

use super::json_rows::row_as_array;
use super::queries::Query;
use super::rows::{Fetch, Run};
use super::{Dialect, InboxMessage, NewInboxMessage, SqlStore, StoreError, new_id};
use crate::clock::Millis;
use crate::domain::UserId;

/// Writes inbox messages at positions `first ..` (reserved by the caller in
/// this transaction, see `positions`) on the caller's connection, for the
/// outcome flush (`outcomes`), whose fenced update says which rows were
/// written. SQLite and MariaDB only: on PostgreSQL the flush writes them
/// with its events in one statement (`append_events_and_inbox`, rows from
/// [`json_at_offsets`]). A message whose outbox row already has one is skipped. Nothing
/// is read back: reading the ids written was about 7% of a SQLite flush's
/// own CPU, for an answer nothing read.
pub(crate) async fn write_rows(
    conn: &mut AnyConnection,
    d: Dialect,
    msgs: &[&NewInboxMessage],
    first: i64,
    now: Millis,
) -> Result<(), StoreError> {
    if msgs.is_empty() {
        return Ok(());
    }
    let rows: Vec<InboxRow> = msgs.iter().zip(first..).map(inbox_row).collect();
    super::values::insert_values(conn, d, Query::InsertInboxValues, rows, now, "insert inbox messages").await.map(drop)
}

fn inbox_row<'a>((m, position): (&&'a NewInboxMessage, i64)) -> InboxRow<'a> {
    InboxRow {
        id: new_id(),
        position,
        outbox_id: &m.outbox_id,
        user_id: &m.user_id,
        title: &m.title,
        body: m.body.as_deref(),
        url: m.url.as_deref(),
        data: m.data.as_ref().map(|d| d.to_string()),
    }
}

/// `msgs` as PostgreSQL's `append_events_and_inbox` reads them: each row's
/// position is its offset from the first position the statement takes,
/// from `first` on (the events come before them).
pub(crate) fn json_at_offsets(msgs: &[&NewInboxMessage], first: i64) -> Result<String, StoreError> {
    let rows: Vec<InboxRow> = msgs.iter().zip(first..).map(inbox_row).collect();
    super::json_rows::to_json(&rows)
}

row_as_array! {
    /// One inbox message as `append_events_and_inbox` reads it (PostgreSQL: one row of
    /// its JSON array) and `insert_inbox_values` binds it.
    #[derive(Debug)]
    struct InboxRow<'a> {
        /// A UUIDv7.
        id: String,
        /// Where it stands in commit order (reserved by the caller): what the
        /// user's stream resumes from.
        position: i64,
        /// The outbox row that delivered it: one message per row.
        outbox_id: &'a str,
        /// Whose inbox.
        user_id: &'a str,
        /// The rendered title.
        title: &'a str,
        /// The rendered body, if any.
        body: Option<&'a str>,
        /// Where the message links to, if anywhere.
        url: Option<&'a str>,
        /// The template's extra data, as JSON text.
        data: Option<String>,
    }
}

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

#[async_trait]
pub trait InboxStore: Send + Sync {
    /// A page of a user's messages, newest first (in commit order); `before`
    /// is the last id of the previous page.
    async fn inbox_page(
        &self,
        user: &UserId,
        filter: InboxFilter,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxMessage>, StoreError>;
    /// Messages after `position`, oldest first: what a stream resuming from
    /// `position` has missed. Positions are handed out in commit order, so
    /// nothing committed later can appear below one already read.
    async fn inbox_after(&self, user: &UserId, position: i64, limit: u32) -> Result<Vec<InboxMessage>, StoreError>;
    /// The newest position in the user's inbox (0 when it is empty): where
    /// a stream that wants only new messages starts.
    async fn inbox_latest_position(&self, user: &UserId) -> Result<i64, StoreError>;
    /// Where a stream resumes from a `Last-Event-ID`: a position as sent by
    /// this version, or (from older clients) a message id, which resumes
    /// after that message, or after the newest message older than it if it
    /// is gone.
    async fn inbox_resume_position(&self, user: &UserId, last_event_id: &str) -> Result<i64, StoreError>;
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
        // Which values "archived" and "read" may take (see `inbox_page`).
        let ((archived, archived_too), (read, read_too)) = match filter {
            InboxFilter::Inbox => ((false, false), (false, true)),
            InboxFilter::Unread => ((false, false), (false, false)),
            InboxFilter::Archived => ((true, true), (false, true)),
            InboxFilter::All => ((false, true), (false, true)),
        };
        // Without `before`, every position is below the top.
        let top = before.is_none().then_some(i64::MAX);
        sqlx::query_as(self.sql(Query::InboxPage))
            .bind(user.as_str().to_owned())
            .bind(archived)
            .bind(archived_too)
            .bind(read)
            .bind(read_too)
            .bind(user.as_str().to_owned())
            .bind(before.map(str::to_owned))
            .bind(top)
            .bind(i64::from(limit))
            .all(self.pool(), "inbox page")
            .await
    }

    async fn inbox_after(&self, user: &UserId, position: i64, limit: u32) -> Result<Vec<InboxMessage>, StoreError> {
        sqlx::query_as(self.sql(Query::InboxAfter))
            .bind(user.as_str().to_owned())
            .bind(position)
            .bind(i64::from(limit))
            .all(self.pool(), "inbox after")
            .await
    }

    async fn inbox_latest_position(&self, user: &UserId) -> Result<i64, StoreError> {
        let row = sqlx::query(self.sql(Query::InboxLatestPosition))
            .bind(user.as_str().to_owned())
            .one(self.pool(), "inbox latest position")
            .await?;
        Ok(row.try_get::<Option<i64>, _>("p").map_err(StoreError::db("inbox latest position"))?.unwrap_or(0))
    }

    async fn inbox_resume_position(&self, user: &UserId, last_event_id: &str) -> Result<i64, StoreError> {
        if let Ok(position) = last_event_id.parse::<i64>() {
            return Ok(position);
        }
        // An id from a client of an older version: ids are UUIDv7, so the
        // messages created after it are the ones it has not seen.
        let row = sqlx::query(self.sql(Query::InboxResumePosition))
            .bind(user.as_str().to_owned())
            .bind(last_event_id.to_owned())
            .bind(last_event_id.to_owned())
            .one(self.pool(), "inbox resume position")
            .await?;
        Ok(row.try_get::<Option<i64>, _>("p").map_err(StoreError::db("inbox resume position"))?.unwrap_or(0))
    }

    async fn inbox_counts(&self, user: &UserId) -> Result<InboxCounts, StoreError> {
        let row = sqlx::query(self.sql(Query::InboxCounts))
            .bind(user.as_str().to_owned())
            .one(self.pool(), "inbox counts")
            .await?;
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
        // Reading or archiving a message also means it was seen.
        let update = match mark {
            InboxMark::Seen => Query::InboxMarkSeen,
            InboxMark::Read => Query::InboxMarkRead,
            InboxMark::Unread => Query::InboxMarkUnread,
            InboxMark::Archive => Query::InboxArchive,
        };
        sqlx::query(self.sql(update))
            .bind(now.0)
            .bind(now.0)
            .bind(id.to_owned())
            .bind(user.as_str().to_owned())
            .run(self.writer(), "inbox mark")
            .await?;
        let msg: Option<InboxMessage> = sqlx::query_as(self.sql(Query::InboxMessage))
            .bind(id.to_owned())
            .bind(user.as_str().to_owned())
            .optional(self.pool(), "inbox mark: read back")
            .await?;
        if msg.is_some() {
            self.signal_inbox_changed(user.as_str()).await;
        }
        Ok(msg)
    }

    async fn inbox_read_all(&self, user: &UserId, now: Millis) -> Result<u64, StoreError> {
        let n = sqlx::query(self.sql(Query::InboxReadAll))
            .bind(now.0)
            .bind(now.0)
            .bind(user.as_str().to_owned())
            .run(self.writer(), "inbox read all")
            .await?;
        if n > 0 {
            self.signal_inbox_changed(user.as_str()).await;
        }
        Ok(n)
    }

    fn inbox_changes(&self) -> broadcast::Receiver<String> {
        self.inbox_changed_sender().subscribe()
    }
}
