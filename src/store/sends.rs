//! Appending to `engagement_sends`, the send log, in sets.

use sqlx::AnyConnection;

use super::json_rows::{Col, to_json};
use super::{Dialect, StoreError, new_id_at};
use crate::clock::Millis;

/// Most rows one statement writes: keeps each JSON parameter to a few
/// megabytes at most (MySQL's packet limit is 16 MiB by default).
pub(crate) const CHUNK: usize = 1000;

/// One send-log row to append.
#[derive(Debug, Clone)]
pub(crate) struct NewSend {
    pub outbox_id: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub user_id: String,
    pub channel: String,
    pub transport: Option<String>,
    pub address_hash: Option<String>,
    pub status: &'static str,
    pub detail: Option<String>,
    pub attempts: i64,
}

/// Appends the rows on the caller's connection (inside its transaction).
pub(crate) async fn insert(
    conn: &mut AnyConnection,
    d: Dialect,
    sends: &[NewSend],
    now: Millis,
) -> Result<(), StoreError> {
    if super::values::inserts_as_values(d) {
        return insert_values(conn, d, sends, now).await;
    }
    let from = d.json_rows(
        &[
            ("id", Col::Key),
            ("outbox_id", Col::Key),
            ("rule_id", Col::Key),
            ("trigger_id", Col::Key),
            ("user_id", Col::Key),
            ("channel", Col::Key),
            ("transport", Col::Key),
            ("address_hash", Col::Key),
            ("status", Col::Key),
            ("detail", Col::Text),
            ("attempts", Col::Int),
        ],
        "s",
    );
    let sql = d.sql(&format!(
        "INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, \
         address_hash, status, detail, attempts, created_at) \
         SELECT s.id, s.outbox_id, s.rule_id, s.trigger_id, s.user_id, s.channel, s.transport, s.address_hash, \
         s.status, s.detail, s.attempts, ? FROM {from}"
    ));
    for chunk in sends.chunks(CHUNK) {
        let rows: Vec<_> = chunk
            .iter()
            .map(|s| {
                // Made from `now`, like created_at: the id range is the time range.
                let id = new_id_at(now);
                (
                    id,
                    &s.outbox_id,
                    &s.rule_id,
                    &s.trigger_id,
                    &s.user_id,
                    &s.channel,
                    &s.transport,
                    &s.address_hash,
                    s.status,
                    &s.detail,
                    s.attempts,
                )
            })
            .collect();
        sqlx::query(&sql)
            .bind(now.0)
            .bind(to_json(&rows)?)
            .execute(&mut *conn)
            .await
            .map_err(StoreError::db("append to the send log"))?;
    }
    Ok(())
}

/// The same rows as multi-row `VALUES` (see `values`).
async fn insert_values(conn: &mut AnyConnection, d: Dialect, sends: &[NewSend], now: Millis) -> Result<(), StoreError> {
    for run in super::values::runs(d, sends) {
        let sql = d.sql(&format!(
            "INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, \
             address_hash, status, detail, attempts, created_at) {}",
            super::values::source(d, 12, &run)
        ));
        let mut query = sqlx::query(&sql);
        for s in run.rows {
            query = query
                .bind(new_id_at(now))
                .bind(s.outbox_id.as_str())
                .bind(s.rule_id.as_deref())
                .bind(s.trigger_id.as_deref())
                .bind(s.user_id.as_str())
                .bind(s.channel.as_str())
                .bind(s.transport.as_deref())
                .bind(s.address_hash.as_deref())
                .bind(s.status)
                .bind(s.detail.as_deref())
                .bind(s.attempts)
                .bind(now.0);
        }
        let query = super::values::bind_padding(query, 12, &run);
        query.execute(&mut *conn).await.map_err(StoreError::db("append to the send log"))?;
    }
    Ok(())
}
