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
use super::json_rows::{Col, to_json};
use super::rows::text;
use super::sends::NewSend;
use super::{Dialect, NewInboxMessage, Record, RecordAction, SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::OutboxStatus;

/// What the fenced update writes for one row, in `CHANGE_COLUMNS` order:
/// the row and its fence (the claim's token, or for a row never claimed the
/// `updated_at` it was read with), the new status (terminal, or `scheduled`
/// for a retry), the error to keep, a retry's new due time (`None` keeps
/// the row's), and the attempts to add (1 for a row never claimed: its
/// attempt was not counted at claim).
type Change<'a> = (&'a str, Option<&'a str>, Option<i64>, &'static str, Option<&'a str>, Option<i64>, i64, Option<i64>);

const CHANGE_COLUMNS: &[(&str, Col)] = &[
    ("id", Col::Key),
    ("token", Col::Key),
    ("version", Col::Int),
    ("status", Col::Key),
    ("last_error", Col::Text),
    ("due_at", Col::Int),
    ("add_attempt", Col::Int),
    ("expires_at", Col::Int),
];

/// The SET list of the fenced update, `o` being the outbox and `c` the
/// changes. `claimed_at` is cleared only for a retry: a finished row keeps
/// when its last attempt started. (MySQL's copy qualifies every column; it
/// applies SET items left to right, so no item reads a column an earlier
/// one wrote.)
const SET_CHANGE: &str = "status = c.status, last_error = c.last_error, due_at = COALESCE(c.due_at, o.due_at), \
     expires_at = COALESCE(c.expires_at, o.expires_at), \
     claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, claim_token = NULL, \
     attempts = o.attempts + c.add_attempt, updated_at = ?";
const SET_CHANGE_MYSQL: &str = "o.status = c.status, o.last_error = c.last_error, \
     o.due_at = COALESCE(c.due_at, o.due_at), o.expires_at = COALESCE(c.expires_at, o.expires_at), \
     o.claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, o.claim_token = NULL, \
     o.attempts = o.attempts + c.add_attempt, o.updated_at = ?";

/// Which rows a fenced update may change.
#[derive(Clone, Copy)]
enum Fence {
    /// Still claimed under the same token, and still `sending`.
    Claimed,
    /// Never claimed: still `scheduled` and unchanged since it was read.
    Unclaimed,
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
                    "detail": outcome.detail, "transport": outcome.transport, "address_hash": outcome.address_hash,
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
        if !events.is_empty() || !inbox.is_empty() {
            // Last, after every row lock this transaction takes (see positions).
            let first = super::positions::reserve(&mut tx, d, events.len() + inbox.len()).await?;
            super::events::insert(&mut tx, d, &events, first, now).await?;
            super::inbox::write_rows(&mut tx, d, &inbox, first + events.len() as i64, now).await?;
        }
        let users = inbox_users(&inbox);
        if !events.is_empty() {
            self.notify_in(&mut tx, !users.is_empty(), &users).await?;
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
    (&item.row.id, item.token.as_deref(), version, status, last_error, due_at, add_attempt, expires_at)
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
    let from = d.json_rows(CHANGE_COLUMNS, "c");
    // The rows are found by primary key, driven by the JSON. Left alone,
    // SQLite walks the status index and scans the JSON once per matching
    // row, and PostgreSQL hashes every scheduled row (the partial index) on
    // every flush; an expression on `status` that no index can serve keeps
    // both on the primary key.
    let status = match d {
        Dialect::Sqlite => "+o.status",
        Dialect::Postgres => "(o.status || '')",
        Dialect::MySql => "o.status",
    };
    let fence = match fence {
        Fence::Claimed => format!("o.id = c.id AND o.claim_token = c.token AND {status} = 'sending'"),
        Fence::Unclaimed => format!("o.id = c.id AND o.updated_at = c.version AND {status} = 'scheduled'"),
    };
    let ids = if d.has_update_returning() {
        // RETURNING names the updated table's column: qualified on
        // PostgreSQL (`id` alone is ambiguous with the JSON's), bare on SQLite.
        let id = if d == Dialect::Postgres { "o.id" } else { "id" };
        // PostgreSQL: the rows picked by primary key whatever the table's
        // size looks like (see `first_of_each_row`); the ids come first in
        // each change.
        let picked = d.first_of_each_row().map(|ids| format!("o.id = ANY({ids}) AND "));
        let sql = d.sql(&format!(
            "UPDATE engagement_outbox AS o SET {SET_CHANGE} FROM {from} WHERE {}{fence} RETURNING {id}",
            picked.as_deref().unwrap_or("")
        ));
        let mut update = sqlx::query(&sql)
            // Planned at every execution on PostgreSQL: see `first_of_each_row`.
            .persistent(d != Dialect::Postgres)
            .bind(now.0)
            .bind(json.as_str());
        if picked.is_some() {
            // The same JSON again, for the ids picked.
            update = update.bind(json.as_str());
        }
        update.fetch_all(&mut *conn).await.map_err(db("record outcomes: update outbox"))?
    } else {
        return fenced_update_without_returning(conn, &from, &fence, changes, &json, now).await;
    };
    ids.iter().map(|r| text(r, "id")).collect::<Result<_, _>>().map_err(db("record outcomes: read ids"))
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
    from: &str,
    fence: &str,
    changes: &[Change<'_>],
    json: &str,
    now: Millis,
) -> Result<HashSet<String>, StoreError> {
    let db = StoreError::db;
    let update = format!("UPDATE {from} STRAIGHT_JOIN engagement_outbox o ON {fence} SET {SET_CHANGE_MYSQL}");
    conn.execute("SAVEPOINT fenced_update").await.map_err(db("record outcomes: savepoint"))?;
    let matched = sqlx::query(&update)
        .bind(json)
        .bind(now.0)
        .execute(&mut *conn)
        .await
        .map_err(db("record outcomes: update outbox"))?
        .rows_affected();
    let ids: HashSet<String> = changes.iter().map(|c| c.0.to_owned()).collect();
    if matched == ids.len() as u64 && ids.len() == changes.len() {
        return Ok(ids);
    }
    conn.execute("ROLLBACK TO SAVEPOINT fenced_update").await.map_err(db("record outcomes: back to the savepoint"))?;
    let rows = sqlx::query(&format!("SELECT o.id FROM {from} STRAIGHT_JOIN engagement_outbox o ON {fence} FOR UPDATE"))
        .bind(json)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("record outcomes: lock outbox rows"))?;
    sqlx::query(&update)
        .bind(json)
        .bind(now.0)
        .execute(&mut *conn)
        .await
        .map_err(db("record outcomes: update outbox"))?;
    rows.iter().map(|r| text(r, "id")).collect::<Result<_, _>>().map_err(db("record outcomes: read ids"))
}

/// The distinct users whose inbox gets a message, sorted.
fn inbox_users(inbox: &[&NewInboxMessage]) -> Vec<String> {
    let mut users: Vec<String> = inbox.iter().map(|m| m.user_id.clone()).collect();
    users.sort_unstable();
    users.dedup();
    users
}
