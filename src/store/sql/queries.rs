//! The fixed statements of the outbox (claim, peek, release, reclaim, the
//! reads behind "did X get it"), each built once per dialect when the store
//! connects: placeholders in the dialect's form, SQLite told which index to
//! use, MariaDB's claim within a slice. Statements whose shape depends on
//! the call (a batch's row count, a JSON parameter) are built where they run.

use crate::store::Dialect;
use crate::store::json_rows::Col;
use crate::store::rows::{IN_STATUS_INDEX, OUTBOX_COLUMNS, SEND_COLUMNS};

/// Every fixed query, already in the dialect's placeholder form.
pub(super) struct Queries {
    pub(super) claim_channel: String,
    /// MariaDB/MySQL: `claim_channel` within a slice (binds `n`, `rank`
    /// before the limit).
    pub(super) claim_channel_slice: String,
    /// MariaDB/MySQL: `peek_channel` within a slice (likewise).
    pub(super) peek_channel_slice: String,
    pub(super) claim_unknown: String,
    pub(super) peek_channel: String,
    pub(super) next_due_channel: String,
    pub(super) claimed_by_token: String,
    pub(super) release: String,
    pub(super) reclaim: String,
    pub(super) next_due: String,
    pub(super) counts: String,
    pub(super) oldest_due: String,
    pub(super) get_outbox: String,
    pub(super) sends_for_user: String,
    pub(super) sends_for_outbox: String,
    pub(super) pending_for_user: String,
    pub(super) inbox_for_user: String,
}

impl Queries {
    pub(super) fn new(d: Dialect) -> Queries {
        // The scheduled rows, in due order: the partial index. SQLite's
        // planner, without statistics, prefers the (status, id) index and
        // then sorts every scheduled row, on every claim; it is told.
        let due_rows = match d {
            Dialect::Sqlite => "engagement_outbox INDEXED BY engagement_outbox_due",
            _ => "engagement_outbox",
        };
        let due_channel_rows = match d {
            Dialect::Sqlite => "engagement_outbox INDEXED BY engagement_outbox_due_channel",
            _ => "engagement_outbox",
        };
        let set_claimed = "SET status = 'sending', claim_token = ?, claimed_by = ?, claimed_at = ?, \
                           updated_at = ?, attempts = attempts + 1";
        // The candidates a claim picks. On PostgreSQL an `id IN (SELECT …
        // LIMIT n)` may be planned as a nested loop that runs the subquery
        // once per scheduled row: with statistics that still say "no row is
        // scheduled" (after a burst of enqueues on a table of millions of
        // finished rows) that took 223 s for 20,000 rows. An array of the
        // picked ids is computed once, and the rows are then found by
        // primary key whatever the statistics say.
        // The outer status test is the compare-and-set; on PostgreSQL it is
        // written so that no index on status can serve it, or the same stale
        // statistics send the update through every scheduled row instead of
        // the primary key (as in `outcomes`).
        let picked = |subquery: &str| match d {
            Dialect::Postgres => format!("(status || '') = 'scheduled' AND id = ANY(ARRAY({subquery}))"),
            _ => format!("status = 'scheduled' AND id IN ({subquery})"),
        };
        // One channel's due rows: its own queue, so a backlog on a slow
        // channel never stands in front of a fast one's rows.
        let claim_channel = if d.has_update_returning() {
            // The subquery picks candidates; the outer `status='scheduled'`
            // is the compare-and-set. Two instances may pick the same ids:
            // PostgreSQL re-checks the WHERE after waiting on a row another
            // claim changed, SQLite has one writer, so each row goes to one.
            format!(
                "UPDATE engagement_outbox {set_claimed} WHERE {} RETURNING {OUTBOX_COLUMNS}",
                picked(&format!(
                    "SELECT id FROM {due_channel_rows} WHERE status = 'scheduled' AND channel = ? AND due_at <= ? \
                     ORDER BY due_at LIMIT ?"
                ))
            )
        } else {
            // MySQL cannot LIMIT a subquery on the table it updates, but a
            // single-table UPDATE may ORDER BY and LIMIT itself. The rows are
            // read back by token afterwards.
            format!(
                "UPDATE engagement_outbox {set_claimed} WHERE status = 'scheduled' AND channel = ? AND due_at <= ? \
                 ORDER BY due_at LIMIT ?"
            )
        };
        let known = d.json_rows(&[("k", Col::Key)], "known");
        let claim_unknown = if d.has_update_returning() {
            format!(
                "UPDATE engagement_outbox {set_claimed} WHERE {} RETURNING {OUTBOX_COLUMNS}",
                picked(&format!(
                    "SELECT id FROM {due_rows} WHERE status = 'scheduled' AND due_at <= ? \
                     AND channel NOT IN (SELECT known.k FROM {known}) ORDER BY due_at LIMIT ?"
                ))
            )
        } else {
            format!(
                "UPDATE engagement_outbox {set_claimed} WHERE status = 'scheduled' AND due_at <= ? \
                 AND channel NOT IN (SELECT known.k FROM {known}) ORDER BY due_at LIMIT ?"
            )
        };
        let taken = d.json_rows(&[("k", Col::Key)], "taken");
        let peek_channel = format!(
            "SELECT {OUTBOX_COLUMNS} FROM {due_channel_rows} WHERE status = 'scheduled' AND channel = ? \
             AND due_at >= ? AND due_at <= ? AND id NOT IN (SELECT taken.k FROM {taken}) ORDER BY due_at LIMIT ?"
        );
        let in_slice = "MOD(CRC32(id), ?) = ?";
        let claim_channel_slice = format!(
            "UPDATE engagement_outbox {set_claimed} WHERE status = 'scheduled' AND channel = ? AND due_at <= ? \
             AND {in_slice} ORDER BY due_at LIMIT ?"
        );
        let peek_channel_slice = format!(
            "SELECT {OUTBOX_COLUMNS} FROM {due_channel_rows} WHERE status = 'scheduled' AND channel = ? \
             AND due_at >= ? AND due_at <= ? AND id NOT IN (SELECT taken.k FROM {taken}) AND {in_slice} \
             ORDER BY due_at LIMIT ?"
        );
        Queries {
            claim_channel: d.sql(&claim_channel),
            claim_channel_slice: d.sql(&claim_channel_slice),
            peek_channel_slice: d.sql(&peek_channel_slice),
            claim_unknown: d.sql(&claim_unknown),
            peek_channel: d.sql(&peek_channel),
            next_due_channel: d
                .sql(&format!("SELECT MIN(due_at) FROM {due_channel_rows} WHERE status = 'scheduled' AND channel = ?")),
            claimed_by_token: d.sql(&format!(
                "SELECT {OUTBOX_COLUMNS} FROM engagement_outbox WHERE claim_token = ? AND status = 'sending'"
            )),
            release: {
                let from = d.json_rows(&[("id", Col::Key), ("token", Col::Key)], "c");
                let set = "status = 'scheduled', attempts = attempts - ?, claim_token = NULL, claimed_at = NULL, \
                           updated_at = ?";
                // (`|| ''`: keeps PostgreSQL on the primary key; see `outcomes`.)
                let fence = match d {
                    Dialect::Postgres => "o.id = c.id AND o.claim_token = c.token AND (o.status || '') = 'sending'",
                    _ => "o.id = c.id AND o.claim_token = c.token AND o.status = 'sending'",
                };
                d.sql(&match d {
                    // The JSON comes first in MySQL's text; `release` binds accordingly.
                    Dialect::MySql => format!(
                        "UPDATE {from} STRAIGHT_JOIN engagement_outbox o ON {fence} SET o.status = 'scheduled', \
                         o.attempts = o.attempts - ?, o.claim_token = NULL, o.claimed_at = NULL, o.updated_at = ?"
                    ),
                    _ => format!("UPDATE engagement_outbox AS o SET {set} FROM {from} WHERE {fence}"),
                })
            },
            // Served by the status index: few rows are ever 'sending'.
            reclaim: d.sql(&format!(
                "UPDATE engagement_outbox SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, \
                 last_error = ?, updated_at = ? WHERE status = 'sending' AND {IN_STATUS_INDEX} AND claimed_at < ?"
            )),
            next_due: format!("SELECT MIN(due_at) FROM {due_rows} WHERE status = 'scheduled'"),
            counts: "SELECT status, COUNT(*) FROM engagement_outbox GROUP BY status".to_owned(),
            oldest_due: d.sql(&format!(
                "SELECT id, user_id, channel, due_at, attempts, last_error FROM {due_rows} \
                 WHERE status = 'scheduled' AND due_at <= ? ORDER BY due_at LIMIT 1"
            )),
            get_outbox: d.sql(&format!("SELECT {OUTBOX_COLUMNS} FROM engagement_outbox WHERE id = ?")),
            sends_for_user: d.sql(&format!(
                "SELECT {SEND_COLUMNS} FROM engagement_sends WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?"
            )),
            sends_for_outbox: d
                .sql(&format!("SELECT {SEND_COLUMNS} FROM engagement_sends WHERE outbox_id = ? ORDER BY created_at, id")),
            pending_for_user: d.sql(&format!(
                "SELECT {OUTBOX_COLUMNS} FROM engagement_outbox WHERE user_id = ? \
                 AND status IN ('scheduled', 'sending') ORDER BY id DESC LIMIT ?"
            )),
            inbox_for_user: d.sql(&format!(
                "SELECT {} FROM engagement_inbox WHERE user_id = ? ORDER BY position DESC LIMIT ?",
                crate::store::inbox::INBOX_COLUMNS
            )),
        }
    }
}
