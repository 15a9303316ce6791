//! Putting rows into `engagement_outbox`, in sets.

use std::collections::{HashMap, HashSet};

use sqlx::AnyConnection;

use super::json_rows::keys_json;
use super::json_rows::row_as_array;
use super::queries::Query;
use super::rows::Fetch;
use super::rows::text;
use super::{Dialect, Enqueued, NewOutboxRow, StoreError};
use crate::clock::Millis;

/// Most keys one lookup sends (see `values::CHUNK`).
const CHUNK: usize = super::values::CHUNK;

/// Inserts rows on the caller's connection, skipping any whose dedupe key
/// exists already, and says what became of each: created, or the id of the
/// row that holds the key. `fresh` promises that no key can exist yet (the
/// rows of a trigger inserted in this same transaction), which spares the
/// lookup MySQL otherwise needs.
pub(crate) async fn insert(
    conn: &mut AnyConnection,
    d: Dialect,
    rows: &[NewOutboxRow],
    fresh: bool,
    now: Millis,
) -> Result<Vec<Enqueued>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let json: Vec<OutboxJson> = rows
        .iter()
        .map(|r| OutboxJson {
            id: &r.id,
            dedupe_key: &r.dedupe_key,
            rule_id: r.rule_id.as_deref(),
            trigger_id: r.trigger_id.as_deref(),
            user_id: r.user_id.as_str(),
            channel: r.channel.as_str(),
            payload: r.payload.to_string(),
            due_at: r.due_at.0,
            expires_at: r.expires_at.map(|t| t.0),
            follow_up_at: r.follow_up_at.map(|t| t.0),
        })
        .collect();
    let queries = (Query::InsertOutbox, Query::InsertOutboxValues);
    let written = super::values::insert(conn, d, queries, json, now, "enqueue").await?;
    // The ids written, where the statement says them (not on MySQL, which
    // cannot say which rows it skipped).
    let inserted: Option<HashSet<String>> = (d != Dialect::MySql)
        .then(|| written.iter().map(|row| text(row, "id")).collect::<Result<_, _>>())
        .transpose()
        .map_err(StoreError::db("enqueue"))?;
    let created = |r: &NewOutboxRow| Enqueued { id: r.id.clone(), dedupe_key: r.dedupe_key.clone(), created: true };
    if fresh {
        return Ok(rows.iter().map(created).collect());
    }
    if let Some(ids) = &inserted
        && ids.len() == rows.len()
    {
        return Ok(rows.iter().map(created).collect());
    }
    // Some keys existed (or, on MySQL, may have): ask which row holds each.
    let mut holders = HashMap::with_capacity(rows.len());
    for chunk in rows.chunks(CHUNK) {
        let found = sqlx::query(Query::OutboxByDedupeKeys.sql(d))
            .bind(keys_json(chunk.iter().map(|r| r.dedupe_key.as_str()))?)
            .all(&mut *conn, "enqueue: read existing")
            .await?;
        for row in &found {
            let id = text(row, "id").map_err(StoreError::db("enqueue: read existing"))?;
            holders.insert(text(row, "dedupe_key").map_err(StoreError::db("enqueue: read existing"))?, id);
        }
    }
    Ok(rows
        .iter()
        .map(|r| {
            let id = holders.get(&r.dedupe_key).cloned().unwrap_or_else(|| r.id.clone());
            Enqueued { created: id == r.id, id, dedupe_key: r.dedupe_key.clone() }
        })
        .collect())
}

row_as_array! {
    /// One outbox row as `insert_outbox` reads it (PostgreSQL, as one row of
    /// its JSON array) and `insert_outbox_values` binds it (see
    /// [`NewOutboxRow`] for what each field means).
    #[derive(Debug)]
    struct OutboxJson<'a> {
        /// The row's id, chosen by the caller.
        id: &'a str,
        /// Unique across the table: a row whose key exists is not inserted.
        dedupe_key: &'a str,
        /// The rule that planned it, if any.
        rule_id: Option<&'a str>,
        /// The trigger it was planned from, if any.
        trigger_id: Option<&'a str>,
        /// The recipient.
        user_id: &'a str,
        /// The channel to deliver it.
        channel: &'a str,
        /// What the channel needs to build the message, as JSON text.
        payload: String,
        /// When it falls due.
        due_at: i64,
        /// Past this it ends as `expired`.
        expires_at: Option<i64>,
        /// When an escalating inbox message's follow-up falls due.
        follow_up_at: Option<i64>,
    }
}
