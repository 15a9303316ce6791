//! Rows as they come back from the database.

use serde::Serialize;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::{Query, QueryAs};
use sqlx::{Any, Executor, FromRow, Row};

use super::StoreError;
use crate::clock::Millis;
use crate::domain::OutboxStatus;

/// Reads a text column. MySQL's TEXT types reach sqlx's `Any` driver as
/// BLOB, so where a `String` will not decode the bytes are taken as UTF-8
/// (Herald only ever writes UTF-8 there).
pub(crate) fn text(row: &AnyRow, col: &str) -> Result<String, sqlx::Error> {
    opt_text(row, col)?
        .ok_or_else(|| sqlx::Error::ColumnDecode { index: col.to_owned(), source: "unexpected NULL".into() })
}

pub(crate) fn opt_text(row: &AnyRow, col: &str) -> Result<Option<String>, sqlx::Error> {
    match row.try_get::<Option<String>, _>(col) {
        Ok(v) => Ok(v),
        Err(sqlx::Error::ColumnDecode { .. }) => {
            let bytes: Option<Vec<u8>> = row.try_get(col)?;
            bytes
                .map(|b| {
                    String::from_utf8(b)
                        .map_err(|e| sqlx::Error::ColumnDecode { index: col.to_owned(), source: e.into() })
                })
                .transpose()
        }
        Err(e) => Err(e),
    }
}

/// A field's value, read from its column: how [`from_columns`] reads each
/// field of a row struct, by the field's type.
pub(crate) trait Column: Sized {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error>;
}

impl Column for String {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        text(row, col)
    }
}

impl Column for Option<String> {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        opt_text(row, col)
    }
}

impl Column for i64 {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        row.try_get(col)
    }
}

impl Column for Option<i64> {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        row.try_get(col)
    }
}

impl Column for Millis {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        row.try_get(col).map(Millis)
    }
}

impl Column for Option<Millis> {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        Ok(row.try_get::<Option<i64>, _>(col)?.map(Millis))
    }
}

/// JSON a host application or Herald wrote (a trigger's payload, an event,
/// a digest item, an inbox message's data). Text that is not JSON is kept
/// as a string rather than losing the row it is in; where unreadable JSON
/// is a corrupt row instead (a rule's template), the reader says so itself.
impl Column for serde_json::Value {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        let json = text(row, col)?;
        Ok(serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json)))
    }
}

impl Column for Option<serde_json::Value> {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        Ok(opt_text(row, col)?.map(|json| serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json))))
    }
}

/// Reads a row struct field by field: `from_columns!(Struct: a, b = "col")`
/// implements sqlx's `FromRow` for `Struct`, each field read from the column
/// of its name (or the one named after `=`) as [`Column`] reads the field's
/// type. The compiler checks the list: a field left out is a struct literal
/// missing a field. Not sqlx's `#[derive(FromRow)]`: through the `Any`
/// driver MySQL's TEXT arrives as BLOB (see [`text`]) and times are
/// [`Millis`], which are not sqlx types; the rejected alternative, a reader
/// per struct, wrote every struct's fields out again as `text(r, "id")?`.
macro_rules! from_columns {
    ($name:ident: $($field:ident $(= $col:literal)?),* $(,)?) => {
        impl<'r> sqlx::FromRow<'r, sqlx::any::AnyRow> for $name {
            fn from_row(row: &'r sqlx::any::AnyRow) -> Result<Self, sqlx::Error> {
                use $crate::store::rows::Column;
                Ok($name { $($field: Column::read(row, from_columns!(@col $field $($col)?))?,)* })
            }
        }
    };
    (@col $field:ident) => { stringify!($field) };
    (@col $field:ident $col:literal) => { $col };
}
pub(crate) use from_columns;

/// A pool or a connection: what a statement runs on.
pub(crate) trait On<'e>: Executor<'e, Database = Any> {}

impl<'e, E: Executor<'e, Database = Any>> On<'e> for E {}

/// Runs a statement on a pool or a connection and names its error by `op`
/// (see [`StoreError::db`]): the `.fetch_all(on).await.map_err(...)` tail
/// every statement of the store had, written once.
pub(crate) trait Fetch<T>: Sized {
    /// Every row.
    async fn all<'e>(self, on: impl On<'e>, op: &'static str) -> Result<Vec<T>, StoreError>;
    /// The one row the statement returns.
    async fn one<'e>(self, on: impl On<'e>, op: &'static str) -> Result<T, StoreError>;
    /// The row, if there is one.
    async fn optional<'e>(self, on: impl On<'e>, op: &'static str) -> Result<Option<T>, StoreError>;
}

/// [`Fetch`]'s methods for a statement whose rows are `$row`: sqlx's
/// `query` and `query_as` have the same three methods, on no common trait.
macro_rules! fetch_methods {
    ($row:ty) => {
        async fn all<'e>(self, on: impl On<'e>, op: &'static str) -> Result<Vec<$row>, StoreError> {
            self.fetch_all(on).await.map_err(StoreError::db(op))
        }

        async fn one<'e>(self, on: impl On<'e>, op: &'static str) -> Result<$row, StoreError> {
            self.fetch_one(on).await.map_err(StoreError::db(op))
        }

        async fn optional<'e>(self, on: impl On<'e>, op: &'static str) -> Result<Option<$row>, StoreError> {
            self.fetch_optional(on).await.map_err(StoreError::db(op))
        }
    };
}

impl<'q, T> Fetch<T> for QueryAs<'q, Any, T, AnyArguments<'q>>
where
    T: for<'r> FromRow<'r, AnyRow> + Send + Unpin,
{
    fetch_methods!(T);
}

impl<'q> Fetch<AnyRow> for Query<'q, Any, AnyArguments<'q>> {
    fetch_methods!(AnyRow);
}

/// [`Fetch`] for a statement that returns no rows.
pub(crate) trait Run: Sized {
    /// Runs it; how many rows it changed.
    async fn run<'e>(self, on: impl On<'e>, op: &'static str) -> Result<u64, StoreError>;
}

impl<'q> Run for Query<'q, Any, AnyArguments<'q>> {
    async fn run<'e>(self, on: impl On<'e>, op: &'static str) -> Result<u64, StoreError> {
        Ok(self.execute(on).await.map_err(StoreError::db(op))?.rows_affected())
    }
}

/// The columns of `engagement_outbox`, in the order every query selects them.
/// The status index's predicate (migration 16: finished rows are almost all
/// `sent`, and they leave that index). A query that the status index serves
/// repeats it beside its own status test: SQLite uses a partial index only
/// when the query names its WHERE term, and PostgreSQL cannot prove it from
/// a status bound as a parameter (a prepared statement's generic plan).
pub(crate) const IN_STATUS_INDEX: &str = "status <> 'sent'";

pub(crate) const OUTBOX_COLUMNS: &str = "id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status, \
     due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at";

#[derive(Debug, Clone, Serialize)]
pub struct OutboxRow {
    pub id: String,
    pub dedupe_key: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub user_id: String,
    pub channel: String,
    pub payload: String,
    pub status: OutboxStatus,
    pub due_at: Millis,
    pub expires_at: Option<Millis>,
    /// Deliveries started, counted when the row is claimed: a row whose
    /// deliveries keep killing the process still runs out of attempts.
    pub attempts: i64,
    pub last_error: Option<String>,
    #[serde(skip)]
    pub claim_token: Option<String>,
    pub claimed_at: Option<Millis>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl OutboxRow {
    /// For a row a send window, quiet hours or an escalation's wait put
    /// back: the hold's words (its `due_at` is when the hold ends). `None`
    /// for a row that is not held, or whose `last_error` is a retry's error
    /// (told apart by [`crate::domain::HoldReason::of_stored`]: the row
    /// keeps the hold's text only).
    pub fn hold_detail(&self) -> Option<&str> {
        let detail = self.last_error.as_deref().filter(|_| self.status == crate::domain::OutboxStatus::Scheduled)?;
        crate::domain::HoldReason::of_stored(detail).map(|_| detail)
    }

    pub(crate) fn from_any(row: &AnyRow) -> Result<OutboxRow, StoreError> {
        let get = StoreError::db("decode engagement_outbox row");
        let status = text(row, "status").map_err(StoreError::db("decode engagement_outbox row"))?;
        let status = status.parse::<OutboxStatus>().map_err(|_| StoreError::CorruptRow {
            table: "engagement_outbox",
            column: "status",
            value: status.clone(),
        })?;
        let inner = || -> Result<OutboxRow, sqlx::Error> {
            Ok(OutboxRow {
                id: text(row, "id")?,
                dedupe_key: text(row, "dedupe_key")?,
                rule_id: opt_text(row, "rule_id")?,
                trigger_id: opt_text(row, "trigger_id")?,
                user_id: text(row, "user_id")?,
                channel: text(row, "channel")?,
                payload: text(row, "payload")?,
                status,
                due_at: Millis(row.try_get("due_at")?),
                expires_at: row.try_get::<Option<i64>, _>("expires_at")?.map(Millis),
                attempts: row.try_get("attempts")?,
                last_error: opt_text(row, "last_error")?,
                claim_token: opt_text(row, "claim_token")?,
                claimed_at: row.try_get::<Option<i64>, _>("claimed_at")?.map(Millis),
                created_at: Millis(row.try_get("created_at")?),
                updated_at: Millis(row.try_get("updated_at")?),
            })
        };
        inner().map_err(get)
    }
}

/// One row of the append-only send log.
#[derive(Debug, Clone, Serialize)]
pub struct SendRecord {
    pub id: String,
    pub outbox_id: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub user_id: String,
    pub channel: String,
    pub transport: Option<String>,
    pub address_hash: Option<String>,
    pub status: String,
    pub detail: Option<String>,
    pub attempts: i64,
    pub created_at: Millis,
    /// The provider's id for the message (see `Finish::provider_id`).
    pub provider_id: Option<String>,
}

from_columns!(SendRecord: id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail,
    attempts, created_at, provider_id);

/// One message in a user's in-app inbox.
#[derive(Debug, Clone, Serialize)]
pub struct InboxMessage {
    pub id: String,
    /// Where the message stands in commit order: what the live stream
    /// resumes from.
    pub position: i64,
    pub outbox_id: String,
    pub user_id: String,
    pub title: String,
    pub body: Option<String>,
    pub url: Option<String>,
    /// Written by Herald as JSON; unreadable JSON is shown as a string
    /// rather than hiding the message.
    pub data: Option<serde_json::Value>,
    pub created_at: Millis,
    pub seen_at: Option<Millis>,
    pub read_at: Option<Millis>,
    pub archived_at: Option<Millis>,
}

from_columns!(InboxMessage: id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at,
    archived_at);

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StatusCount {
    pub status: OutboxStatus,
    pub count: i64,
}

/// What `herald status` and `/metrics` report about the outbox.
#[derive(Debug, Clone, Serialize)]
pub struct StatusSummary {
    /// Every status, zero included, so a dashboard sees the series exist.
    pub counts: Vec<StatusCount>,
    /// The scheduled row that has been due the longest, if any is due.
    pub oldest_due: Option<OldestDue>,
    /// When the next scheduled row falls due (may be in the future).
    pub next_due_at: Option<Millis>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OldestDue {
    pub id: String,
    pub user_id: String,
    pub channel: String,
    pub due_at: Millis,
    pub attempts: i64,
    pub last_error: Option<String>,
    /// How long past due it is, in seconds, at the time of the summary.
    pub overdue_seconds: f64,
}

impl StatusSummary {
    pub fn count(&self, status: OutboxStatus) -> i64 {
        self.counts.iter().find(|c| c.status == status).map_or(0, |c| c.count)
    }
}

/// An inbox row claimed under `token` after `attempts` attempts, due at
/// 1 s: what the worker's unit tests decide and record.
#[cfg(test)]
pub(crate) fn claimed_row(id: &str, token: &str, attempts: i64) -> OutboxRow {
    OutboxRow {
        id: id.into(),
        dedupe_key: format!("k-{id}"),
        rule_id: None,
        trigger_id: None,
        user_id: "u".into(),
        channel: "inbox".into(),
        payload: "{}".into(),
        status: OutboxStatus::Sending,
        due_at: Millis(1_000),
        expires_at: None,
        attempts,
        last_error: None,
        claim_token: Some(token.into()),
        claimed_at: Some(Millis(1_000)),
        created_at: Millis(0),
        updated_at: Millis(0),
    }
}
