//! Putting rows into `engagement_outbox`, in sets.

use std::collections::{HashMap, HashSet};

use sqlx::AnyConnection;

use super::json_rows::{Col, keys_json, to_json};
use super::rows::text;
use super::{Dialect, Enqueued, NewOutboxRow, StoreError};
use crate::clock::Millis;

/// Most rows one statement writes (see `sends::CHUNK`).
const CHUNK: usize = super::sends::CHUNK;

const COLUMNS: &[(&str, Col)] = &[
    ("id", Col::Key),
    ("dedupe_key", Col::Key),
    ("rule_id", Col::Key),
    ("trigger_id", Col::Key),
    ("user_id", Col::Key),
    ("channel", Col::Key),
    ("payload", Col::Text),
    ("due_at", Col::Int),
    ("expires_at", Col::Int),
    ("follow_up_at", Col::Int),
];

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
    let mut inserted: Option<HashSet<String>> = (d != Dialect::MySql).then(|| HashSet::with_capacity(rows.len()));
    if super::values::inserts_as_values(d) {
        insert_values(conn, d, rows, inserted.as_mut(), now).await?;
    } else {
        insert_json(conn, d, rows, inserted.as_mut(), now).await?;
    }
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
        let sql = d.select_by_keys("o.id, o.dedupe_key", "engagement_outbox", "o", "dedupe_key");
        let found = sqlx::query(&sql)
            .bind(keys_json(chunk.iter().map(|r| r.dedupe_key.as_str()))?)
            .fetch_all(&mut *conn)
            .await
            .map_err(StoreError::db("enqueue: read existing"))?;
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

/// PostgreSQL: the rows as one JSON array (see `json_rows`). Adds the ids
/// written to `inserted`.
async fn insert_json(
    conn: &mut AnyConnection,
    d: Dialect,
    rows: &[NewOutboxRow],
    mut inserted: Option<&mut HashSet<String>>,
    now: Millis,
) -> Result<(), StoreError> {
    let from = d.json_rows(COLUMNS, "r");
    let sql = d.sql(&format!(
        "INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status, \
         due_at, expires_at, follow_up_at, attempts, created_at, updated_at) \
         SELECT r.id, r.dedupe_key, r.rule_id, r.trigger_id, r.user_id, r.channel, r.payload, 'scheduled', \
         r.due_at, r.expires_at, r.follow_up_at, 0, ?, ? FROM {from} ON CONFLICT (dedupe_key) DO NOTHING RETURNING id"
    ));
    for chunk in rows.chunks(CHUNK) {
        let json: Vec<_> = chunk
            .iter()
            .map(|r| {
                let (user, channel, payload) = (r.user_id.as_str(), r.channel.as_str(), r.payload.to_string());
                let (expires, follow_up) = (r.expires_at.map(|t| t.0), r.follow_up_at.map(|t| t.0));
                (
                    &r.id,
                    &r.dedupe_key,
                    &r.rule_id,
                    &r.trigger_id,
                    user,
                    channel,
                    payload,
                    r.due_at.0,
                    expires,
                    follow_up,
                )
            })
            .collect();
        let query = sqlx::query(&sql).bind(now.0).bind(now.0).bind(to_json(&json)?);
        for row in query.fetch_all(&mut *conn).await.map_err(StoreError::db("enqueue"))? {
            if let Some(ids) = inserted.as_deref_mut() {
                ids.insert(text(&row, "id").map_err(StoreError::db("enqueue"))?);
            }
        }
    }
    Ok(())
}

/// MySQL and SQLite: the rows as multi-row `VALUES` (see `values`). Adds
/// the ids written to `inserted` when given (not on MySQL, which cannot say
/// which rows it skipped).
async fn insert_values(
    conn: &mut AnyConnection,
    d: Dialect,
    rows: &[NewOutboxRow],
    mut inserted: Option<&mut HashSet<String>>,
    now: Millis,
) -> Result<(), StoreError> {
    let skip = match d {
        Dialect::MySql => " ON DUPLICATE KEY UPDATE dedupe_key = engagement_outbox.dedupe_key",
        _ => " ON CONFLICT (dedupe_key) DO NOTHING RETURNING id",
    };
    for run in super::values::runs(d, rows) {
        let sql = d.sql(&format!(
            "INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status, \
             due_at, expires_at, follow_up_at, attempts, created_at, updated_at) {}{skip}",
            super::values::source(d, 14, &run)
        ));
        let mut query = sqlx::query(&sql);
        for r in run.rows {
            query = query
                .bind(r.id.as_str())
                .bind(r.dedupe_key.as_str())
                .bind(r.rule_id.as_deref())
                .bind(r.trigger_id.as_deref())
                .bind(r.user_id.as_str())
                .bind(r.channel.as_str())
                .bind(r.payload.to_string())
                .bind("scheduled")
                .bind(r.due_at.0)
                .bind(r.expires_at.map(|t| t.0))
                .bind(r.follow_up_at.map(|t| t.0))
                .bind(0_i64)
                .bind(now.0)
                .bind(now.0);
        }
        let query = super::values::bind_padding(query, 14, &run);
        match inserted.as_deref_mut() {
            Some(ids) => {
                for row in query.fetch_all(&mut *conn).await.map_err(StoreError::db("enqueue"))? {
                    ids.insert(text(&row, "id").map_err(StoreError::db("enqueue"))?);
                }
            }
            None => {
                query.execute(&mut *conn).await.map_err(StoreError::db("enqueue"))?;
            }
        }
    }
    Ok(())
}
