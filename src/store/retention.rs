//! Pruning old rows: the deletes behind [`crate::retention`].
//!
//! Every delete takes at most `limit` rows and walks an index from its
//! oldest end, so one call costs the same on a table of a thousand rows or
//! of a hundred million, and a long backlog is worked off in small steps
//! that never hold a lock for long (on SQLite, never hold the single writer
//! for long). Two instances pruning at once delete the same rows or
//! neighbouring ones; either way nothing but old rows goes, so no
//! coordination is needed beyond treating a lost race as "try next time".
//!
//! Time ranges of the id-keyed tables (outbox, send log) are id ranges:
//! their ids are UUIDv7 made at insert time (see [`super::first_id_at`]).
//!
//! Age alone never decides: a row that something still to be delivered
//! reads stays, however old, until that is done. An escalation follow-up
//! (planned or not yet) reads its inbox message's outbox row and inbox row
//! when it is composed, and is cancelled as "no longer exists" without
//! them; a digest message still open or waiting holds its triggers, whose
//! idempotency keys must keep a host's retry from planning them again; a
//! retried row is `scheduled`, so it counts as waiting for all of these.
//! The rejected alternative, touching the original's `updated_at` when its
//! follow-up is planned, only moves the problem: the follow-up may then be
//! held (quiet hours, a send window, retries) for longer than the period.

use sqlx::Row;

use super::rows::IN_STATUS_INDEX;
use super::rows::Run;
use super::{Dialect, SqlStore, Store, StoreError, first_id_at};
use crate::clock::Millis;
use crate::domain::OutboxStatus;

/// A table that retention prunes, and which of its rows are old enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prunable {
    /// Outbox rows in a terminal status whose last change is older than
    /// the cutoff. Scheduled and sending rows are never pruned, nor an inbox
    /// message whose escalation follow-up is still to be planned or sent.
    Outbox,
    /// The send log ("did user X get it").
    Sends,
    /// Outcome events (`GET /v1/events`): a follower further behind than
    /// this resumes from the oldest event kept.
    Events,
    /// Inbox messages the user archived (unarchived messages stay), but
    /// not while their escalation follow-up is still to be planned or sent:
    /// archived unread, the follow-up of an `unless: read` rule must go.
    ArchivedInbox,
    /// Bounce and complaint evidence (the suppressions it led to stay).
    Bounces,
    /// Planned triggers none of whose messages is still scheduled or
    /// sending, a digest message they joined included. Their idempotency
    /// keys go with them.
    Triggers,
    /// Closed digests (`engagement_digests`): a bucket whose digest message
    /// is no longer scheduled or sending, so no trigger can join it (the
    /// next trigger opens a new one either way). Never an open digest.
    Digests,
    /// Which triggers went into a digest (`engagement_digest_items`), once
    /// the digest message itself has been pruned from the outbox: as long
    /// as the send log shows the message, it shows what it held.
    DigestItems,
    /// Frequency-cap slots last used longer ago than any cap can count.
    ThrottleSlots,
}

impl Prunable {
    /// In pass order: digest items after the outbox rows they follow.
    pub const ALL: [Prunable; 9] = [
        Prunable::Outbox,
        Prunable::Sends,
        Prunable::Events,
        Prunable::ArchivedInbox,
        Prunable::Bounces,
        Prunable::Triggers,
        Prunable::Digests,
        Prunable::DigestItems,
        Prunable::ThrottleSlots,
    ];

    /// The full configuration key that sets it.
    pub fn retention_key(self) -> &'static str {
        self.keys().0
    }

    /// The `retention.*` key that sets it, without the section: its metric label.
    pub fn key(self) -> &'static str {
        self.keys().1
    }

    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Prunable::Outbox => ("retention.outbox", "outbox"),
            Prunable::Sends => ("retention.sends", "sends"),
            Prunable::Events => ("retention.events", "events"),
            Prunable::ArchivedInbox => ("retention.archived_inbox", "archived_inbox"),
            Prunable::Bounces => ("retention.bounces", "bounces"),
            Prunable::Triggers => ("retention.triggers", "triggers"),
            // The digest tables live as long as the outbox rows they
            // describe; the slots' age is not a setting (see
            // `RetentionSettings::period`).
            Prunable::Digests => ("retention.outbox", "digests"),
            Prunable::DigestItems => ("retention.outbox", "digest_items"),
            Prunable::ThrottleSlots => ("retention.enabled", "throttle_slots"),
        }
    }
}

impl SqlStore {
    /// Deletes at most `limit` rows of `table` older than `cutoff`; returns
    /// how many went. Fewer than `limit`: nothing older is left (for now).
    pub async fn prune(&self, table: Prunable, cutoff: Millis, limit: u32) -> Result<u64, StoreError> {
        let d = self.dialect();
        let limit = i64::from(limit.max(1));
        let deleted = match table {
            Prunable::Outbox => {
                // One status at a time, so each delete is a range of the
                // (status, id) index; the updated_at test keeps a row that
                // was made long ago but finished recently (a long delay, a
                // long retry) for the whole period. An inbox message stays
                // while its follow-up is pending (see `prune_outbox_sql`).
                let (sent, others) = prune_outbox_sql(d);
                let mut total = 0;
                for status in OutboxStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
                    let sql = if status == OutboxStatus::Sent { &sent } else { &others };
                    total += sqlx::query(sql)
                        .bind(status.as_str())
                        .bind(first_id_at(cutoff))
                        .bind(cutoff.0)
                        .bind(limit - total as i64)
                        .bind(status.as_str())
                        .bind(cutoff.0)
                        .run(self.writer(), "prune outbox")
                        .await?;
                    if total as i64 >= limit {
                        break;
                    }
                }
                total
            }
            Prunable::Events => self.prune_events(cutoff, limit).await?,
            Prunable::Digests | Prunable::DigestItems | Prunable::ThrottleSlots => {
                self.prune_workflow(table, cutoff, limit).await?
            }
            // The rest: one delete of the oldest rows before the cutoff.
            single => {
                let archived = archived_inbox_condition(d);
                let (table, condition, order, cutoff, op) = match single {
                    Prunable::Sends => {
                        ("engagement_sends", "id < ?", "id", Bound::Id(first_id_at(cutoff)), "prune send log")
                    }
                    Prunable::ArchivedInbox => (
                        "engagement_inbox",
                        archived.as_str(),
                        "archived_at",
                        Bound::Millis(cutoff.0),
                        "prune archived inbox",
                    ),
                    Prunable::Bounces => {
                        ("engagement_bounces", "created_at < ?", "created_at", Bound::Millis(cutoff.0), "prune bounces")
                    }
                    // A trigger whose message is still to be delivered is
                    // read when it is composed: it stays until that message
                    // is done, and while an inbox message it planned has a
                    // follow-up still to plan (planned with its trigger).
                    // So does one that joined a digest still to be
                    // delivered (its message is the digest's, planned by
                    // the digest's first trigger): its idempotency key is
                    // what keeps a host's retry out of the digest.
                    Prunable::Triggers => (
                        "engagement_triggers",
                        // Scalar subqueries, one index lookup per candidate:
                        // as `NOT EXISTS`, PostgreSQL read the whole outbox
                        // for each batch (see `prune_outbox_sql`).
                        "created_at < ? AND planned_at IS NOT NULL AND (SELECT 1 FROM engagement_outbox o \
                         WHERE o.trigger_id = engagement_triggers.id \
                         AND (o.status IN ('scheduled', 'sending') OR o.follow_up_at IS NOT NULL) LIMIT 1) IS NULL \
                         AND (SELECT 1 FROM engagement_digest_items di JOIN engagement_outbox o \
                         ON o.id = di.outbox_id WHERE di.trigger_id = engagement_triggers.id \
                         AND o.status IN ('scheduled', 'sending') LIMIT 1) IS NULL",
                        "created_at",
                        Bound::Millis(cutoff.0),
                        "prune triggers",
                    ),
                    Prunable::Outbox
                    | Prunable::Events
                    | Prunable::Digests
                    | Prunable::DigestItems
                    | Prunable::ThrottleSlots => unreachable!("pruned above"),
                };
                let sql = limited_delete(d, table, condition, order);
                let query = match cutoff {
                    Bound::Id(id) => sqlx::query(&sql).bind(id),
                    Bound::Millis(ms) => sqlx::query(&sql).bind(ms),
                };
                query.bind(limit).execute(self.writer()).await.map_err(StoreError::db(op))?.rows_affected()
            }
        };
        Ok(deleted)
    }

    /// The workflow tables. Their keys are not ids (a bucket; a trigger and
    /// rule; a bucket and slot), so the batch is chosen by the row's
    /// physical address where the key is composite (SQLite's `rowid`,
    /// PostgreSQL's `ctid`), and the condition is tested again on the row
    /// being deleted: a slot taken again, or a digest joined, between the
    /// choice and the delete is left alone (PostgreSQL re-reads a row that
    /// changed under it; MySQL's single-table delete locks what it reads;
    /// SQLite has one writer).
    async fn prune_workflow(&self, table: Prunable, cutoff: Millis, limit: i64) -> Result<u64, StoreError> {
        let d = self.dialect();
        let physical = if d == Dialect::Postgres { "ctid" } else { "rowid" };
        let (name, key, condition, order, op) = match table {
            // Open means its message may still take a trigger: scheduled
            // (or being delivered, and then retried).
            Prunable::Digests => (
                "engagement_digests",
                "bucket",
                "opened_at < ? AND NOT EXISTS (SELECT 1 FROM engagement_outbox o \
                 WHERE o.id = engagement_digests.outbox_id AND o.status IN ('scheduled', 'sending'))",
                "opened_at",
                "prune closed digests",
            ),
            Prunable::DigestItems => (
                "engagement_digest_items",
                physical,
                "created_at < ? AND NOT EXISTS (SELECT 1 FROM engagement_outbox o \
                 WHERE o.id = engagement_digest_items.outbox_id)",
                "created_at",
                "prune digest items",
            ),
            Prunable::ThrottleSlots => {
                ("engagement_throttle_slots", physical, "used_at < ?", "used_at", "prune throttle slots")
            }
            other => unreachable!("{other:?} is not a workflow table"),
        };
        // One batched delete per workflow table: the table, its condition and its order vary.
        let sql = d.sql(&match d {
            Dialect::MySql => format!("DELETE FROM {name} WHERE {condition} ORDER BY {order} LIMIT ?"),
            Dialect::Postgres => format!(
                "DELETE FROM {name} WHERE {key} = ANY(ARRAY(SELECT {key} FROM {name} WHERE {condition} \
                 ORDER BY {order} LIMIT ?)) AND {condition}"
            ),
            // (The same delete, in SQLite's form.)
            Dialect::Sqlite => format!(
                "DELETE FROM {name} WHERE {key} IN (SELECT {key} FROM {name} WHERE {condition} ORDER BY {order} \
                 LIMIT ?) AND {condition}"
            ),
        });
        let mut query = sqlx::query(&sql).bind(cutoff.0).bind(limit);
        if d != Dialect::MySql {
            query = query.bind(cutoff.0);
        }
        Ok(query.execute(self.writer()).await.map_err(StoreError::db(op))?.rows_affected())
    }

    /// Events are keyed by position, appended in (nearly) time order: read
    /// the positions and times of the oldest `limit` events, and delete the
    /// run of them older than the cutoff by a range of the primary key. A
    /// plain "created_at < cutoff ORDER BY position" would, once nothing
    /// is old enough, walk the whole table to find that out.
    /// The oldest event alone is read first: most passes find it too young
    /// and stop there, rather than reading `limit` rows to learn nothing.
    async fn prune_events(&self, cutoff: Millis, limit: i64) -> Result<u64, StoreError> {
        let d = self.dialect();
        let sql = d.sql("SELECT position, created_at FROM engagement_events ORDER BY position LIMIT ?");
        let read = |n: i64| sqlx::query(&sql).bind(n).fetch_all(self.pool());
        let first = read(1).await.map_err(StoreError::db("prune events: read the oldest"))?;
        match first.first() {
            None => return Ok(0),
            Some(row) => {
                let created_at: i64 = row.try_get("created_at").map_err(StoreError::db("prune events: created_at"))?;
                if created_at >= cutoff.0 {
                    return Ok(0);
                }
            }
        }
        let oldest = read(limit).await.map_err(StoreError::db("prune events: read the oldest"))?;
        let mut last = None;
        for row in &oldest {
            let created_at: i64 = row.try_get("created_at").map_err(StoreError::db("prune events: created_at"))?;
            if created_at >= cutoff.0 {
                break;
            }
            last = Some(row.try_get::<i64, _>("position").map_err(StoreError::db("prune events: position"))?);
        }
        let Some(last) = last else { return Ok(0) };
        let deleted = sqlx::query(&d.sql("DELETE FROM engagement_events WHERE position <= ?"))
            .bind(last)
            .run(self.writer(), "prune events")
            .await?;
        Ok(deleted)
    }
}

/// A cutoff as the table's ordering column holds it.
enum Bound {
    /// A time-ordered id (UUIDv7): the smallest made at the cutoff.
    Id(String),
    Millis(i64),
}

/// The outbox's prune, one status at a time (binds: status, id bound,
/// cutoff, limit, then status and cutoff again): `sent` rows, nearly all of
/// them, are a range of the primary key; the other statuses' rows are found
/// on the status index (see IN_STATUS_INDEX).
///
/// An inbox message is kept while its escalation follow-up is pending:
/// not yet planned (`follow_up_at` set), or planned and still scheduled
/// or being delivered (a row whose dedupe key names it). The second is one
/// lookup of that key on its unique index per inbox candidate, written as
/// a scalar subquery on purpose: as `NOT EXISTS` or an anti-join,
/// PostgreSQL hashed every pending row of the outbox for each batch (a
/// sequential scan; 700 ms against 37 ms for a batch of 1,000 among
/// 400,000 rows) and MariaDB materialised them. The batch is chosen in a
/// subquery that MySQL and MariaDB accept only as a derived table (a
/// delete may not otherwise read its own table), and the status and age
/// are tested again on the row being deleted, so a row an operator
/// retried meanwhile stays.
pub(super) fn prune_outbox_sql(d: Dialect) -> (String, String) {
    let pending = pending_follow_up(d, "o.id");
    let batch = |extra: &str| {
        // Two batches (sent rows, the others) from one text; see `limited_delete`.
        format!(
            "SELECT o.id FROM engagement_outbox o WHERE o.status = ? AND o.id < ? AND o.updated_at < ? \
             AND o.follow_up_at IS NULL AND (o.channel <> 'inbox' OR {pending} IS NULL){extra} ORDER BY o.id LIMIT ?"
        )
    };
    let recheck = "status = ? AND updated_at < ? AND follow_up_at IS NULL";
    let delete = |batch: String| {
        // The batch above, in each dialect's form of a limited delete.
        d.sql(&match d {
            Dialect::MySql => format!(
                "DELETE gone FROM ({batch}) AS chosen STRAIGHT_JOIN engagement_outbox gone ON gone.id = chosen.id \
                 WHERE gone.{}",
                recheck.replace(" AND ", " AND gone.")
            ),
            // An array computed once: see queries/postgres/README.md.
            Dialect::Postgres => {
                format!("DELETE FROM engagement_outbox WHERE id = ANY(ARRAY({batch})) AND {recheck}")
            }
            Dialect::Sqlite => format!("DELETE FROM engagement_outbox WHERE id IN ({batch}) AND {recheck}"),
        })
    };
    let sent = delete(batch(""));
    // The status index's predicate, named so SQLite uses the index.
    let others = delete(batch(&format!(" AND o.{IN_STATUS_INDEX}")));
    (sent, others)
}

/// Archived inbox messages older than the cutoff (bind: cutoff), but not
/// one whose escalation follow-up is still to be planned or sent: the
/// follow-up reads when the message was delivered, seen and read, and
/// without it is cancelled as if the user had deleted it.
fn archived_inbox_condition(d: Dialect) -> String {
    // A condition that `limited_delete` completes, with the dialect's concatenation.
    format!(
        "archived_at IS NOT NULL AND archived_at < ? \
         AND (SELECT o.follow_up_at FROM engagement_outbox o WHERE o.id = engagement_inbox.outbox_id) IS NULL \
         AND {} IS NULL",
        pending_follow_up(d, "engagement_inbox.outbox_id")
    )
}

/// SQL that is 1 while the inbox message whose outbox id is `id` has a
/// follow-up row still scheduled or being delivered (its dedupe key names
/// the message, see [`crate::planning::workflow::FOLLOW_UP_PREFIX`]), and
/// NULL otherwise: one lookup on the dedupe key's unique index (see
/// `prune_outbox_sql` for why not `NOT EXISTS`).
fn pending_follow_up(d: Dialect, id: &str) -> String {
    let prefix = crate::planning::workflow::FOLLOW_UP_PREFIX;
    // A fragment of the statements above: the dialect's concatenation.
    let key = match d {
        Dialect::MySql => format!("CONCAT('{prefix}', {id})"),
        Dialect::Postgres | Dialect::Sqlite => format!("'{prefix}' || {id}"),
    };
    // (The fragment, around the key.)
    format!("(SELECT 1 FROM engagement_outbox f WHERE f.dedupe_key = {key} AND f.status IN ('scheduled', 'sending'))")
}

/// `DELETE` of at most `?` (the last parameter) rows of `table` (by `id`) matching
/// `condition`, oldest by `order` first. MySQL and MariaDB take `LIMIT` on a
/// single-table delete but not in an `IN (SELECT …)`; the others take the
/// subquery.
fn limited_delete(d: Dialect, table: &str, condition: &str, order: &str) -> String {
    // Not yet named queries (retention, outside the message path): built from the table, its condition and its order.
    d.sql(&match d {
        Dialect::MySql => format!("DELETE FROM {table} WHERE {condition} ORDER BY {order} LIMIT ?"),
        // An array computed once: see queries/postgres/README.md for
        // the nested loop PostgreSQL may otherwise choose.
        Dialect::Postgres => format!(
            "DELETE FROM {table} WHERE id = ANY(ARRAY(SELECT id FROM {table} WHERE {condition} ORDER BY {order} \
             LIMIT ?))"
        ),
        // (The same delete, in SQLite's form.)
        Dialect::Sqlite => format!(
            "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE {condition} ORDER BY {order} LIMIT ?)"
        ),
    })
}
