//! Persistence: one interface, [`Store`], over SQLite, PostgreSQL and MariaDB/MySQL.
//!
//! # Why one SQL implementation with three dialects
//! The three backends differ in a handful of places: placeholder syntax, how an
//! `INSERT` ignores a duplicate, whether `UPDATE … RETURNING` exists, how a
//! migration takes a lock. Everything that matters for correctness — the
//! compare-and-set claim, the fencing token on every write after it, the outcome
//! and its send-log row in one transaction — is the same logic in all three.
//! So [`SqlStore`] holds that logic once, over sqlx's `Any` driver; the SQL
//! text of each statement is written out per dialect, by name, in
//! `queries/{sqlite,postgres,mariadb}/`, one file per area, with what SQLite
//! and MariaDB run in the same text written once in `queries/shared/` (see
//! [`queries`]), and
//! [`Dialect`] holds two capabilities. The alternative, three copies of the
//! Rust (River's layout, in a language where generics over drivers are
//! cheaper), would triple the code that has to stay identical for the fencing
//! guarantees to hold. The one
//! conformance suite in `tests/store_conformance.rs` runs against each dialect.
//!
//! # Why times are integers
//! Every timestamp column is a BIGINT of milliseconds since the Unix epoch,
//! UTC. The native types disagree (PostgreSQL's `timestamptz`, MySQL's
//! `DATETIME` that depends on the session time zone, SQLite's text), and the
//! worker's hottest query compares `due_at` against now: an integer compares
//! the same way, at the same cost, everywhere. Readers convert at the edge
//! ([`crate::clock::Millis`]).

mod admin;
mod bounces;
pub mod copy;
mod dialect;
mod digests;
mod escalation;
pub mod events;
mod fan_out;
mod history;
mod inbox;
mod instances;
mod json_rows;
pub mod listen;
mod migrate;
mod operators;
mod outbox;
mod outcomes;
mod positions;
mod push_devices;
pub mod queries;
pub mod race;
mod recipients;
mod retention;
mod rows;
#[cfg(test)]
pub(crate) use rows::claimed_row;
mod rules;
mod sends;
mod sql;
mod suppressions;
mod throttle;
mod topics;
mod triggers;
mod values;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::clock::Millis;
use crate::domain::{ChannelName, SendStatus, UserId};

pub use admin::{OutboxAdmin, OutboxFilter, RowAction};
pub use bounces::{BounceEvidence, BounceRow, BounceStore, MatchedSend, NewBounce};
pub use dialect::Dialect;
pub use digests::{DigestItemRow, DigestMembership, DigestStore, NewDigestItem};
pub use escalation::{EscalationStore, OriginalState};
pub use events::{EventRow, EventStore};
pub use fan_out::{Audience, CANCEL_CHUNK, ChunkRule, FanOutRow, FanOutStore, NewFanOut, OutcomeCount, PlanChunk};
pub use history::{HistoryStore, UserHistory};
pub use inbox::{InboxCounts, InboxFilter, InboxMark, InboxStore};
pub use instances::{InstanceIdentity, InstanceRow, InstanceStore, LAPSED_INSTANCE_RETENTION};
pub use migrate::AppliedMigration;
pub use operators::{
    AuditEntry, AuditRow, LOGIN_ATTEMPT_RETENTION, LoginAttempt, LoginFailures, LoginOutcome, OperatorRow,
    OperatorStore, SessionRow, SuppressionLiftRow,
};
pub use push_devices::{NewPushDevice, PushDeviceRow, PushDeviceStore, Registered};
pub use recipients::{ApiKeyRow, ChoicesMerged, RecipientRow, RecipientStore, UserErasure};
pub use retention::Prunable;
pub use rows::{InboxMessage, OldestDue, OutboxRow, SendRecord, StatusCount, StatusSummary};
pub use rules::{CancelScope, RuleRow, RuleStore};
pub use sql::{ConnectOptions, SqlStore};
pub use suppressions::{ALL_CATEGORIES, Lift, SuppressionReason, SuppressionRow, SuppressionStore};
pub use throttle::{SlotAnswer, SlotRequest, ThrottleStore, bucket as throttle_bucket};
pub use topics::{Page, Subscribed, Subscription, TopicDeletion, TopicRow, TopicStore};
pub use triggers::{NewTrigger, PlannedTrigger, TriggerFacts, TriggerInsert, TriggerPlan, TriggerRow, TriggerStore};

/// An error from the database layer, with the operation that hit it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{op}: {source}")]
    Database {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        version: i64,
        name: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error(
        "the database has migration {version} applied, which this Herald does not know; \
         it was migrated by a newer Herald, so run that version (or restore an older backup)"
    )]
    UnknownMigration { version: i64 },
    #[error(
        "database URL {url:?} is not supported; expected sqlite://PATH, postgres://… or mysql://… (mariadb://… is accepted too)"
    )]
    UnsupportedUrl { url: String },
    #[error("the batched database writer stopped unexpectedly")]
    WriterGone,
    /// One failure shared by every item of a group-committed batch.
    #[error(transparent)]
    Shared(Arc<StoreError>),
    #[error("corrupt row in {table}: column {column} holds {value:?}")]
    CorruptRow { table: &'static str, column: &'static str, value: String },
    /// Rows could not be put into a statement's JSON parameter (a bug, not
    /// bad data: every value Herald writes serialises).
    #[error("could not encode rows for the database: {0}")]
    Encode(String),
    /// A fault a test put in the way (`lost_race`: one that
    /// [`StoreError::is_lost_race`] should retry).
    #[error("injected fault: {what}")]
    Injected { what: &'static str, lost_race: bool },
}

impl StoreError {
    pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Database { op, source }
    }

    /// Lost a race with another instance's transaction (a deadlock or a
    /// serialization failure: SQLSTATE class 40 on PostgreSQL and MariaDB,
    /// `SQLITE_BUSY` on SQLite). The statement did nothing and the next
    /// sweep does it again, so callers log it as a warning, not an error:
    /// with several instances it is routine, and nothing is lost.
    pub fn is_contention(&self) -> bool {
        match self {
            StoreError::Database { source: sqlx::Error::Database(e), .. } => {
                e.code().is_some_and(|c| c.starts_with("40") || c == "5" || c == "517")
            }
            StoreError::Shared(inner) => inner.is_contention(),
            _ => false,
        }
    }

    /// The server refused to write because it cannot: a PostgreSQL standby
    /// (25006, "cannot execute … in a read-only transaction") or a MariaDB
    /// server running read-only (1290, 1792), as an old primary or a
    /// standby reached just after a failover is.
    pub fn is_read_only(&self) -> bool {
        match self {
            StoreError::Database { source, .. } | StoreError::Migration { source, .. } => read_only(source),
            StoreError::Shared(inner) => inner.is_read_only(),
            _ => false,
        }
    }

    /// A race the same transaction again would likely win: contention
    /// (see [`StoreError::is_contention`]) or a read-only server. See
    /// [`race`].
    pub fn is_lost_race(&self) -> bool {
        match self {
            StoreError::Injected { lost_race, .. } => *lost_race,
            StoreError::Shared(inner) => inner.is_lost_race(),
            _ => self.is_contention() || self.is_read_only(),
        }
    }

    /// The database is away (the connection failed or was cut, the pool
    /// timed out, the server is shutting down or a Galera node is not
    /// ready), as opposed to refusing this statement for what it is.
    pub fn is_unavailable(&self) -> bool {
        let source = match self {
            StoreError::Database { source, .. } | StoreError::Migration { source, .. } => source,
            StoreError::Shared(inner) => return inner.is_unavailable(),
            StoreError::WriterGone => return true,
            StoreError::Injected { lost_race, .. } => return !*lost_race,
            _ => return false,
        };
        match source {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(e) => {
                // SQLSTATE 08 (connection exception) and 57P0x (the server
                // is shutting down or starting); MariaDB 1047 (a Galera
                // node not ready), 1053 (server shutdown), 2006/2013 (gone).
                let code = e.code().unwrap_or_default();
                code.starts_with("08")
                    || code.starts_with("57P")
                    || mysql_number(e.as_ref()).is_some_and(|n| matches!(n, 1047 | 1053 | 2006 | 2013))
            }
            _ => false,
        }
    }
}

pub(crate) fn mysql_number(e: &dyn sqlx::error::DatabaseError) -> Option<u16> {
    e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().map(|m| m.number())
}

fn read_only(source: &sqlx::Error) -> bool {
    let sqlx::Error::Database(e) = source else { return false };
    e.code().is_some_and(|c| c == "25006") || mysql_number(e.as_ref()).is_some_and(|n| matches!(n, 1290 | 1792))
}

/// A message to schedule. `id` is chosen by the caller (a UUIDv7, see
/// [`new_id`]) so a batch insert needs no per-dialect way to learn its ids.
#[derive(Debug, Clone)]
pub struct NewOutboxRow {
    pub id: String,
    /// Unique across the table: the same key again plans nothing new. The
    /// planner uses `trigger:rule:channel`, so a replayed trigger or a second
    /// planner instance never doubles a message.
    pub dedupe_key: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub user_id: UserId,
    pub channel: ChannelName,
    /// What the channel needs to build the message, as JSON.
    pub payload: serde_json::Value,
    pub due_at: Millis,
    /// `due_at + grace`: past this the row ends as `expired`, never delivered.
    /// Fixed at planning time, so retries cannot stretch it.
    pub expires_at: Option<Millis>,
    /// For an inbox message whose rule escalates: when its follow-up falls
    /// due. The worker plans the follow-up row then (see
    /// `delivery::worker::follow_ups`), not with the message.
    pub follow_up_at: Option<Millis>,
}

/// What became of one row handed to [`Store::enqueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The row now holding this dedupe key: the new one, or the one before it.
    pub id: String,
    pub dedupe_key: String,
    /// False when the dedupe key already existed and nothing was inserted.
    pub created: bool,
}

/// A terminal outcome to record for a claimed row: the send-log row's
/// status, words, transport and address hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    pub status: SendStatus,
    pub detail: Option<String>,
    pub transport: Option<String>,
    pub address_hash: Option<String>,
    /// The provider's id for the message (Message-ID, Twilio's sid,
    /// Slack's ts), for a `sent` outcome that has one.
    pub provider_id: Option<String>,
}

impl Finish {
    /// An outcome that is not a delivery, in words, with no address hash.
    pub fn because(status: SendStatus, detail: impl Into<String>) -> Finish {
        Finish { status, detail: Some(detail.into()), transport: None, address_hash: None, provider_id: None }
    }

    /// Delivered by `transport`, with nothing more to say.
    pub fn sent(transport: impl Into<String>) -> Finish {
        Finish {
            status: SendStatus::Sent,
            detail: None,
            transport: Some(transport.into()),
            address_hash: None,
            provider_id: None,
        }
    }
}

/// What to write for one claimed row: its outcome, its retry, or its hold.
/// The worker's retry policy (`delivery::worker::policy::decide`) turns a
/// channel's `Outcome` into this directly; it is the one word for a row's
/// fate between the channel and the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordAction {
    Finish(Finish),
    Reschedule {
        due_at: Millis,
        detail: String,
    },
    /// Back to `scheduled` at `due_at` without counting the attempt (a send
    /// window, quiet hours or an escalation's wait held it), with its new
    /// expiry. `detail` becomes the row's `last_error`; `reason` goes in
    /// the `held` event.
    Hold {
        due_at: Millis,
        expires_at: Option<Millis>,
        reason: crate::domain::HoldReason,
        detail: String,
    },
}

/// One claimed row's result, for [`Store::record_outcomes`].
#[derive(Debug, Clone)]
pub struct Record {
    pub row: OutboxRow,
    /// The claim this instance holds on the row, which every write is fenced
    /// by. `None` for a row never claimed (read with
    /// [`Store::peek_channel`]): its outcome is written only if the row is
    /// still `scheduled` and unchanged since it was read (its `updated_at`),
    /// and the write counts the attempt; claim and outcome are then one
    /// compare-and-set in one transaction, and the row never sits in
    /// `sending`.
    pub token: Option<String>,
    pub action: RecordAction,
    /// The in-app message an inbox delivery produced. It is written in the
    /// same transaction as the `sent` outcome, fenced by the same claim, so
    /// the message exists exactly when the send log says it was sent: a
    /// delivery whose claim was taken back writes nothing, and a crash before
    /// the commit leaves neither.
    pub inbox: Option<NewInboxMessage>,
}

/// The in-app inbox entry the `inbox` channel writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInboxMessage {
    pub outbox_id: String,
    pub user_id: String,
    pub title: String,
    pub body: Option<String>,
    pub url: Option<String>,
    pub data: Option<serde_json::Value>,
}

/// A fresh identifier: UUIDv7, so ids sort by creation time, are unique across
/// instances without coordination, and do not reveal a count. The time in it
/// is the database's (this machine's clock corrected by the skew the
/// service's [`crate::clock::DbClock`] measured), so ids from an instance
/// whose clock is wrong still sort, and age, with everyone else's.
///
/// The random bits come from a thread-local CSPRNG (uuid's `fast-rng`), not
/// a `getrandom` system call per id: a SQLite drain spent a sixth of its
/// outcome flushes' own CPU there (three ids a row: send log, event, inbox
/// message). Whole `herald bench --rows 100000` runs, alternating: 1.02-1.17x
/// faster (median 1.05), system time 2.35 -> 2.03 s.
pub fn new_id() -> String {
    // A context keeps the ids this process makes in the same millisecond
    // in order.
    static CONTEXT: std::sync::Mutex<uuid::ContextV7> = std::sync::Mutex::new(uuid::ContextV7::new());
    let (secs, nanos) = unix(crate::clock::id_time());
    let context = CONTEXT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(&*context, secs, nanos)).to_string()
}

/// [`new_id`] carrying the time `t`: for rows whose id range stands for
/// their time range (the send log), the id is made from the same clock as
/// the row's `created_at`, so the two agree exactly, under a test's clock
/// too. (No ordering context: a context never goes back in time, and `t`
/// may be any clock's.)
pub fn new_id_at(t: Millis) -> String {
    let (secs, nanos) = unix(t);
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, nanos)).to_string()
}

fn unix(t: Millis) -> (u64, u32) {
    let ms = t.0.max(0) as u64;
    (ms / 1000, (ms % 1000) as u32 * 1_000_000)
}

/// The smallest id [`new_id`] can make at `t`: ids at or after it were made
/// at `t` or later, so a time range of an id-keyed table is an id range.
pub fn first_id_at(t: Millis) -> String {
    let ms = t.0.max(0) as u64;
    // An id, not SQL.
    format!("{:08x}-{:04x}-7000-8000-000000000000", ms >> 16, ms & 0xffff)
}

/// The operations Herald needs from its database.
///
/// Every write after a claim takes the claim's token and changes nothing when
/// the token no longer matches (the claim was reclaimed as stale and someone
/// else owns the row now): those return `Ok(false)`.
#[async_trait]
pub trait Store:
    TriggerStore
    + FanOutStore
    + RuleStore
    + RecipientStore
    + SuppressionStore
    + OutboxAdmin
    + InboxStore
    + EventStore
    + BounceStore
    + OperatorStore
    + InstanceStore
    + ThrottleStore
    + DigestStore
    + EscalationStore
    + HistoryStore
    + PushDeviceStore
    + TopicStore
    + Send
    + Sync
    + 'static
{
    fn dialect(&self) -> Dialect;

    /// Signalled after every enqueue that created a row, so the worker in this
    /// process can start at once instead of at its next poll.
    fn enqueued_signal(&self) -> Arc<Notify>;

    /// Applies the migrations this build knows and the database lacks.
    async fn migrate(&self) -> Result<Vec<AppliedMigration>, StoreError>;

    /// A cheap round trip, for `/readyz`.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The database's clock, in milliseconds since the epoch: what every
    /// instance agrees "now" is (see [`crate::clock::DbClock`]).
    async fn database_time(&self) -> Result<Millis, StoreError>;

    /// Inserts rows, skipping any whose dedupe key exists already.
    async fn enqueue(&self, rows: &[NewOutboxRow], now: Millis) -> Result<Vec<Enqueued>, StoreError>;

    /// Claims up to `limit` of one channel's due rows, oldest due first, by
    /// compare-and-set: marks them `sending` under `token`, counts the
    /// attempt, and returns the rows this call won. Each channel is its own
    /// queue (served by its own index), so a backlog on a slow channel never
    /// stands in front of another's rows.
    async fn claim_channel(
        &self,
        channel: &str,
        now: Millis,
        limit: u32,
        token: &str,
    ) -> Result<Vec<OutboxRow>, StoreError>;

    /// Claims due rows whose channel is none of `known`: rows for a channel
    /// this instance does not have, to be ended with the reason.
    async fn claim_unknown_channels(
        &self,
        known: &[&str],
        now: Millis,
        limit: u32,
        token: &str,
    ) -> Result<Vec<OutboxRow>, StoreError>;

    /// One channel's due rows, oldest due first, without claiming them
    /// (leaving out `exclude`, rows this instance is still recording, and
    /// with `from_due` rows due before it): for a channel whose delivery is
    /// a write in this database, claimed and finished in one transaction
    /// (see [`Record::token`]).
    async fn peek_channel(
        &self,
        channel: &str,
        now: Millis,
        limit: u32,
        exclude: &[&str],
        from_due: Option<Millis>,
    ) -> Result<Vec<OutboxRow>, StoreError>;

    /// The earliest `due_at` among one channel's scheduled rows.
    async fn next_due_for(&self, channel: &str) -> Result<Option<Millis>, StoreError>;

    /// Writes the results of claimed rows, all in one transaction: each
    /// outcome with its send-log row, each retry with its new due time. Each
    /// write is fenced by its row's token; the result says, per item, whether
    /// the claim still held (false: nothing was written for that row).
    async fn record_outcomes(&self, items: &[Record], now: Millis) -> Result<Vec<bool>, StoreError>;

    /// Ends a claimed row and appends its send-log row, in one transaction.
    async fn finish(&self, row: &OutboxRow, token: &str, outcome: &Finish, now: Millis) -> Result<bool, StoreError> {
        let item = Record {
            row: row.clone(),
            token: Some(token.to_owned()),
            action: RecordAction::Finish(outcome.clone()),
            inbox: None,
        };
        Ok(self.record_outcomes(&[item], now).await?[0])
    }

    /// Puts a claimed row back to `scheduled` at `due_at`, with the error.
    async fn reschedule(
        &self,
        row: &OutboxRow,
        token: &str,
        due_at: Millis,
        detail: &str,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let action = RecordAction::Reschedule { due_at, detail: detail.to_owned() };
        let item = Record { row: row.clone(), token: Some(token.to_owned()), action, inbox: None };
        Ok(self.record_outcomes(&[item], now).await?[0])
    }

    /// Gives claims back unfinished (shutdown), as `(id, token)` pairs, in
    /// one statement. `refund_attempt` when the delivery never started (a
    /// row claimed ahead, or waiting for a delivery slot), so the attempt
    /// does not count against the row. Returns how many were given back.
    async fn release_many(
        &self,
        claims: &[(String, String)],
        refund_attempt: bool,
        now: Millis,
    ) -> Result<u64, StoreError>;

    /// [`Store::release_many`] for one claim.
    async fn release(&self, id: &str, token: &str, refund_attempt: bool, now: Millis) -> Result<bool, StoreError> {
        Ok(self.release_many(&[(id.to_owned(), token.to_owned())], refund_attempt, now).await? == 1)
    }

    /// Takes back claims older than `cutoff`: their owner died or stalled.
    async fn reclaim_stale(&self, cutoff: Millis, now: Millis) -> Result<u64, StoreError>;

    /// The earliest `due_at` among scheduled rows, so the worker can sleep
    /// exactly until then.
    async fn next_due_at(&self) -> Result<Option<Millis>, StoreError>;

    /// Counts by status and the oldest due row.
    async fn status_summary(&self, now: Millis) -> Result<StatusSummary, StoreError>;

    async fn get_outbox(&self, id: &str) -> Result<Option<OutboxRow>, StoreError>;

    /// The send log for one user, newest first.
    async fn sends_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<SendRecord>, StoreError>;

    /// The send log for one outbox row, oldest first.
    async fn sends_for_outbox(&self, outbox_id: &str) -> Result<Vec<SendRecord>, StoreError>;

    /// Rows for one user still waiting (`scheduled` or `sending`), newest first.
    async fn pending_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<OutboxRow>, StoreError>;

    /// A user's inbox, newest first.
    async fn inbox_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<InboxMessage>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_falls_between_the_bounds_of_its_time() {
        let before = first_id_at(crate::clock::id_time());
        let id = new_id();
        let after = first_id_at(Millis(crate::clock::id_time().0 + 2));
        assert!(before <= id && id < after, "{before} <= {id} < {after}");
        assert!(new_id() > id, "ids made later sort later");
    }
}
