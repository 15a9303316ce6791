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
//! Each table's delete is a named statement (`queries/*/retention.sql`,
//! `prune_*`), in each dialect's form of a limited delete: MySQL and
//! MariaDB take `ORDER BY … LIMIT` on a single-table delete but not in an
//! `IN (SELECT …)`, PostgreSQL takes the batch as an array computed once,
//! SQLite as `IN (SELECT …)`. They were assembled here from the table, its
//! condition and its order; nine tables in three forms were then nowhere
//! to be read as the database receives them.
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

use super::queries::Query;
use super::rows::{Fetch, Run};
use super::{SqlStore, StoreError, first_id_at};
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
        let limit = i64::from(limit.max(1));
        // Each table's delete is a statement of its own (queries/*/retention.sql),
        // binding its cutoff as the table's ordering column holds it.
        let (query, bound, op) = match table {
            Prunable::Outbox => return self.prune_outbox(cutoff, limit).await,
            Prunable::Events => return self.prune_events(cutoff, limit).await,
            Prunable::Sends => (Query::PruneSends, Bound::Id(first_id_at(cutoff)), "prune send log"),
            Prunable::ArchivedInbox => (Query::PruneArchivedInbox, Bound::Millis(cutoff.0), "prune archived inbox"),
            Prunable::Bounces => (Query::PruneBounces, Bound::Millis(cutoff.0), "prune bounces"),
            Prunable::Triggers => (Query::PruneTriggers, Bound::Millis(cutoff.0), "prune triggers"),
            Prunable::Digests => (Query::PruneDigests, Bound::Millis(cutoff.0), "prune closed digests"),
            Prunable::DigestItems => (Query::PruneDigestItems, Bound::Millis(cutoff.0), "prune digest items"),
            Prunable::ThrottleSlots => (Query::PruneThrottleSlots, Bound::Millis(cutoff.0), "prune throttle slots"),
        };
        let query = sqlx::query(self.sql(query));
        let query = match bound {
            Bound::Id(id) => query.bind(id),
            Bound::Millis(ms) => query.bind(ms),
        };
        query.bind(limit).run(self.writer(), op).await
    }

    /// One status at a time, so each delete is a range of the (status, id)
    /// index (`sent` rows, nearly all of them, a range of the primary key;
    /// the others found on the status index, see IN_STATUS_INDEX); the
    /// updated_at test keeps a row that was made long ago but finished
    /// recently (a long delay, a long retry) for the whole period. An inbox
    /// message stays while its follow-up is pending: not yet planned, or
    /// planned and still scheduled or being delivered, looked up as a
    /// scalar subquery on purpose: as `NOT EXISTS` or an anti-join,
    /// PostgreSQL hashed every pending row of the outbox for each batch (a
    /// sequential scan; 700 ms against 37 ms for a batch of 1,000 among
    /// 400,000 rows) and MariaDB materialised them. The status and age are
    /// tested again on the row being deleted, so a row an operator retried
    /// meanwhile stays.
    async fn prune_outbox(&self, cutoff: Millis, limit: i64) -> Result<u64, StoreError> {
        let mut total = 0;
        for status in OutboxStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            let query = if status == OutboxStatus::Sent { Query::PruneOutboxSent } else { Query::PruneOutboxOthers };
            total += sqlx::query(self.sql(query))
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
        Ok(total)
    }

    /// Events are keyed by position, appended in (nearly) time order: read
    /// the positions and times of the oldest `limit` events, and delete the
    /// run of them older than the cutoff by a range of the primary key. A
    /// plain "created_at < cutoff ORDER BY position" would, once nothing
    /// is old enough, walk the whole table to find that out.
    /// The oldest event alone is read first: most passes find it too young
    /// and stop there, rather than reading `limit` rows to learn nothing.
    async fn prune_events(&self, cutoff: Millis, limit: i64) -> Result<u64, StoreError> {
        let read = |n: i64| {
            sqlx::query(self.sql(Query::PruneEventsOldest)).bind(n).all(self.pool(), "prune events: read the oldest")
        };
        let first = read(1).await?;
        match first.first() {
            None => return Ok(0),
            Some(row) => {
                let created_at: i64 = row.try_get("created_at").map_err(StoreError::db("prune events: created_at"))?;
                if created_at >= cutoff.0 {
                    return Ok(0);
                }
            }
        }
        let oldest = read(limit).await?;
        let mut last = None;
        for row in &oldest {
            let created_at: i64 = row.try_get("created_at").map_err(StoreError::db("prune events: created_at"))?;
            if created_at >= cutoff.0 {
                break;
            }
            last = Some(row.try_get::<i64, _>("position").map_err(StoreError::db("prune events: position"))?);
        }
        let Some(last) = last else { return Ok(0) };
        sqlx::query(self.sql(Query::PruneEvents)).bind(last).run(self.writer(), "prune events").await
    }
}

/// A cutoff as the table's ordering column holds it.
enum Bound {
    /// A time-ordered id (UUIDv7): the smallest made at the cutoff.
    Id(String),
    Millis(i64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Dialect;

    /// The deletes name an inbox message's follow-ups by their dedupe
    /// keys, written out in their text: the prefix the planner gives them,
    /// and the suffix of every later step a chain may have.
    #[test]
    fn the_deletes_find_follow_ups_by_the_planners_prefix() {
        use crate::planning::workflow::{FOLLOW_UP_PREFIX, MAX_ESCALATION_STEPS, follow_up_key};
        let prefix = format!("'{FOLLOW_UP_PREFIX}'");
        for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            for q in [Query::PruneOutboxSent, Query::PruneOutboxOthers, Query::PruneArchivedInbox] {
                let sql = q.sql(d);
                assert!(sql.contains(&prefix), "{d}: {} names follow-ups by {prefix}", q.name());
                for step in 2..=MAX_ESCALATION_STEPS {
                    let suffix = follow_up_key("", step).replacen(FOLLOW_UP_PREFIX, "", 1);
                    assert!(sql.contains(&format!("'{suffix}'")), "{d}: {} names step {step}'s follow-ups", q.name());
                }
                assert!(!sql.contains(&format!("':{}'", MAX_ESCALATION_STEPS + 1)), "{d}: no step past the last");
            }
        }
    }
}
