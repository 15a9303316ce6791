//! Writing what the worker decided about claimed rows, in sets.
//!
//! One flush, whatever its size, is one transaction of a fixed number of
//! statements: the fenced outbox update, the send-log rows, the positions,
//! the events (outcomes, and `held` for a row a send window, quiet hours or
//! an escalation's wait put back), the inbox messages and (PostgreSQL) one
//! notification. The per-row version of this (three statements a row) is
//! what held the drain to about 1,600 rows a second.

use std::collections::HashSet;

use sqlx::{AnyConnection, Executor};

use super::events::NewEvent;
use super::json_rows::row_as_array;
use super::json_rows::to_json;
use super::queries::Query;
use super::rows::text;
use super::rows::{Fetch, Run};
use super::sends::NewSend;
use super::{Dialect, NewInboxMessage, Record, RecordAction, SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::OutboxStatus;

row_as_array! {
    /// What the fenced update (`record_claimed`, `record_unclaimed`) writes for
    /// one row: one row of its JSON parameter (and on SQLite, the same
    /// fields as one tuple of its `VALUES` list).
    #[derive(Debug)]
    struct Change<'a> {
        /// The outbox row.
        id: &'a str,
        /// The fence of a claimed row: the token of the claim, which must
        /// still be the row's.
        token: Option<&'a str>,
        /// The fence of a row never claimed: the `updated_at` it was read with.
        version: Option<i64>,
        /// The new status: terminal, or `scheduled` for a retry or a hold.
        status: &'static str,
        /// The error to keep (`None` for a sent row).
        last_error: Option<&'a str>,
        /// A retry's or a hold's new due time; `None` keeps the row's.
        due_at: Option<i64>,
        /// Attempts to add: 1 for a row never claimed (its attempt was not
        /// counted at claim), -1 for a claimed row held back, else 0.
        add_attempt: i64,
        /// A hold's new expiry; `None` keeps the row's.
        expires_at: Option<i64>,
    }
}

/// Which rows a fenced update may change.
#[derive(Clone, Copy)]
enum Fence {
    /// Still claimed under the same token, and still `sending`.
    Claimed,
    /// Never claimed: still `scheduled` and unchanged since it was read.
    Unclaimed,
}

impl Fence {
    /// The update, and (MariaDB) the same rows locked.
    fn queries(self) -> (Query, Query) {
        match self {
            Fence::Claimed => (Query::RecordClaimed, Query::LockClaimed),
            Fence::Unclaimed => (Query::RecordUnclaimed, Query::LockUnclaimed),
        }
    }
}

impl SqlStore {
    /// See [`super::Store::record_outcomes`].
    pub(super) async fn record_outcomes_set(&self, items: &[Record], now: Millis) -> Result<Vec<bool>, StoreError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let d = self.dialect();
        let db = StoreError::db;
        let (claimed, unclaimed): (Vec<&Record>, Vec<&Record>) = items.iter().partition(|i| i.token.is_some());
        let mut tx = self.begin_write().await.map_err(db("record outcomes: begin"))?;
        let mut won = HashSet::with_capacity(items.len());
        for (fence, group) in [(Fence::Claimed, claimed), (Fence::Unclaimed, unclaimed)] {
            if !group.is_empty() {
                let changes: Vec<Change> = group.into_iter().map(change).collect();
                won.extend(fenced_update(&mut tx, d, fence, &changes, now).await?);
            }
        }

        let mut sends = Vec::new();
        let mut events = Vec::new();
        let mut inbox: Vec<&NewInboxMessage> = Vec::new();
        let mut results = Vec::with_capacity(items.len());
        for item in items {
            let ok = won.contains(item.row.id.as_str());
            results.push(ok);
            let row = &item.row;
            // A hold is not an outcome (no send-log row), but a follower
            // keeping its own state wants to know the message waits and
            // why: an event in the same transaction as the hold.
            if let (true, RecordAction::Hold { due_at, reason, detail, .. }) = (ok, &item.action) {
                events.push(NewEvent {
                    kind: "held",
                    user_id: Some(row.user_id.clone()),
                    outbox_id: Some(row.id.clone()),
                    data: serde_json::json!({
                        "outbox_id": row.id, "user_id": row.user_id, "rule_id": row.rule_id,
                        "trigger_id": row.trigger_id, "channel": row.channel, "status": "scheduled",
                        "until": due_at.to_rfc3339(), "reason": reason.as_str(),
                        "detail": detail, "at": now.to_rfc3339(),
                    }),
                });
                continue;
            }
            let (true, RecordAction::Finish(outcome)) = (ok, &item.action) else { continue };
            events.push(NewEvent {
                kind: "outcome",
                user_id: Some(row.user_id.clone()),
                outbox_id: Some(row.id.clone()),
                data: serde_json::json!({
                    "outbox_id": row.id, "user_id": row.user_id, "rule_id": row.rule_id,
                    "trigger_id": row.trigger_id, "channel": row.channel, "status": outcome.status.as_str(),
                    "detail": outcome.detail, "transport": outcome.transport, "address_hash": outcome.address_hash, "provider_id": outcome.provider_id,
                    "attempts": row.attempts, "at": now.to_rfc3339(),
                }),
            });
            sends.push(NewSend {
                outbox_id: row.id.clone(),
                rule_id: row.rule_id.clone(),
                trigger_id: row.trigger_id.clone(),
                user_id: row.user_id.clone(),
                channel: row.channel.clone(),
                transport: outcome.transport.clone(),
                address_hash: outcome.address_hash.clone(),
                status: outcome.status.as_str(),
                detail: outcome.detail.clone(),
                attempts: row.attempts,
                provider_id: outcome.provider_id.clone(),
            });
            // The inbox message exists exactly when its 'sent' does: both
            // commit here, fenced by the same claim.
            if outcome.status.outbox_status() == OutboxStatus::Sent
                && let Some(msg) = &item.inbox
            {
                inbox.push(msg);
            }
        }
        if !sends.is_empty() {
            super::sends::insert(&mut tx, d, &sends, now).await?;
        }
        let users = inbox_users(&inbox);
        // Positions last, after every row lock this transaction takes (see
        // positions): every other flush waits from the reservation to the
        // commit.
        let positions = events.len() + inbox.len();
        if positions > 0 && d == Dialect::Postgres {
            // Positions, events, inbox and notifications in one statement,
            // its JSON made before it (see append_events_and_inbox).
            let events_json = super::events::json_at_offsets(&events)?;
            let inbox_json = super::inbox::json_at_offsets(&inbox, events.len() as i64)?;
            sqlx::query(Query::AppendEventsAndInbox.sql(d))
                .bind(positions as i64)
                .bind(events_json)
                .bind(inbox_json)
                .bind(now.0)
                .bind(super::sql::inbox_notice(&users))
                .run(&mut *tx, "record outcomes: events and inbox")
                .await?;
        } else if positions > 0 {
            let first = super::positions::reserve(&mut tx, d, positions).await?;
            super::events::insert(&mut tx, d, &events, first, now).await?;
            super::inbox::write_rows(&mut tx, d, &inbox, first + events.len() as i64, now).await?;
        }
        tx.commit().await.map_err(db("record outcomes: commit"))?;
        if !events.is_empty() {
            self.announce_committed(&users);
        }
        Ok(results)
    }
}

fn change(item: &Record) -> Change<'_> {
    let mut refund = false;
    let mut expires_at = None;
    let (status, last_error, due_at) = match &item.action {
        // A sent row carries no error: an earlier attempt's error would
        // read as the reason for a message that arrived.
        RecordAction::Finish(f) => {
            let status = f.status.outbox_status();
            let error = if status == OutboxStatus::Sent { None } else { f.detail.as_deref() };
            (status.as_str(), error, None)
        }
        RecordAction::Reschedule { due_at, detail } => ("scheduled", Some(detail.as_str()), Some(due_at.0)),
        RecordAction::Hold { due_at, expires_at: e, detail, .. } => {
            refund = true;
            expires_at = e.map(|t| t.0);
            ("scheduled", Some(detail.as_str()), Some(due_at.0))
        }
    };
    // A held row was not attempted: a claimed one gives back the attempt
    // its claim counted, an unclaimed one counts none.
    let (version, add_attempt) = match &item.token {
        Some(_) => (None, if refund { -1 } else { 0 }),
        None => (Some(item.row.updated_at.0), if refund { 0 } else { 1 }),
    };
    Change {
        id: &item.row.id,
        token: item.token.as_deref(),
        version,
        status,
        last_error,
        due_at,
        add_attempt,
        expires_at,
    }
}

/// Applies the changes to the rows whose claim still holds (same token,
/// still `sending`) and returns their ids. A row whose claim was taken back
/// is left to the newer attempt: nothing is written for it.
async fn fenced_update(
    conn: &mut AnyConnection,
    d: Dialect,
    fence: Fence,
    changes: &[Change<'_>],
    now: Millis,
) -> Result<HashSet<String>, StoreError> {
    let db = StoreError::db;
    let json = to_json(changes)?;
    if d == Dialect::Sqlite {
        return fenced_update_values(conn, fence, changes, now).await;
    }
    let (update, lock) = fence.queries();
    if !d.has_update_returning() {
        return fenced_update_without_returning(conn, d, (update, lock), changes, &json, now).await;
    }
    let ids = sqlx::query(update.sql(d))
        // Planned at every execution on PostgreSQL: see queries/postgres/README.md.
        .persistent(d != Dialect::Postgres)
        .bind(json.as_str())
        .bind(now.0)
        .all(&mut *conn, "record outcomes: update outbox")
        .await?;
    ids.iter().map(|r| text(r, "id")).collect::<Result<_, _>>().map_err(db("record outcomes: read ids"))
}

/// SQLite: the changes as a `VALUES` list, cut into runs as the inserts are
/// (see `values`), named by a CTE's columns. Read from one JSON parameter of
/// objects by field name they cost SQLite's drain 5-8% (`herald bench --rows
/// 20000`, alternating pairs); as a list the statement reads no JSON at all.
async fn fenced_update_values(
    conn: &mut AnyConnection,
    fence: Fence,
    changes: &[Change<'_>],
    now: Millis,
) -> Result<HashSet<String>, StoreError> {
    let db = StoreError::db;
    let d = Dialect::Sqlite;
    let q = match fence {
        Fence::Claimed => Query::RecordClaimedValues,
        Fence::Unclaimed => Query::RecordUnclaimedValues,
    };
    // Every bind but the last (`now`) is once per row.
    let per_row = q.binds(d).len() - 1;
    let mut won = HashSet::with_capacity(changes.len());
    for run in super::values::runs(d, changes) {
        let mut query = sqlx::query(super::values::statement(q, d, &run));
        for c in run.rows {
            query = match fence {
                Fence::Claimed => query.bind(c.id).bind(c.token),
                Fence::Unclaimed => query.bind(c.id).bind(c.version),
            };
            query = query.bind(c.status).bind(c.last_error).bind(c.due_at).bind(c.add_attempt).bind(c.expires_at);
        }
        let query = super::values::bind_padding(query, per_row, &run).bind(now.0);
        for row in query.all(&mut *conn, "record outcomes: update outbox").await? {
            won.insert(text(&row, "id").map_err(db("record outcomes: read ids"))?);
        }
    }
    Ok(won)
}

/// MySQL has no `UPDATE … RETURNING`. The sure way to learn which rows
/// still held their claim is to lock them first (`SELECT … FOR UPDATE`)
/// and then update exactly those, but that reads every row twice, and on
/// MariaDB the outbox update was already the costliest statement of a
/// drain. Nearly always every claim still holds, so the update goes first,
/// behind a savepoint: when the fence matched every change (the server
/// counts rows matched, not changed: sqlx asks for `CLIENT_FOUND_ROWS`),
/// every id won and nothing more is read. Otherwise the update is undone
/// to the savepoint and the rows are locked and updated the sure way.
async fn fenced_update_without_returning(
    conn: &mut AnyConnection,
    d: Dialect,
    (update, lock): (Query, Query),
    changes: &[Change<'_>],
    json: &str,
    now: Millis,
) -> Result<HashSet<String>, StoreError> {
    let db = StoreError::db;
    let update = || sqlx::query(update.sql(d)).bind(json).bind(now.0);
    conn.execute("SAVEPOINT fenced_update").await.map_err(db("record outcomes: savepoint"))?;
    let matched = update().run(&mut *conn, "record outcomes: update outbox").await?;
    let ids: HashSet<String> = changes.iter().map(|c| c.id.to_owned()).collect();
    if matched == ids.len() as u64 && ids.len() == changes.len() {
        return Ok(ids);
    }
    conn.execute("ROLLBACK TO SAVEPOINT fenced_update").await.map_err(db("record outcomes: back to the savepoint"))?;
    let rows = sqlx::query(lock.sql(d)).bind(json).all(&mut *conn, "record outcomes: lock outbox rows").await?;
    update().run(&mut *conn, "record outcomes: update outbox").await?;
    rows.iter().map(|r| text(r, "id")).collect::<Result<_, _>>().map_err(db("record outcomes: read ids"))
}

/// The distinct users whose inbox gets a message, sorted.
fn inbox_users(inbox: &[&NewInboxMessage]) -> Vec<String> {
    let mut users: Vec<String> = inbox.iter().map(|m| m.user_id.clone()).collect();
    users.sort_unstable();
    users.dedup();
    users
}
