//! `engagement_throttle_slots`: the frequency caps' slots.
//!
//! A cap of `limit` messages per `per` seconds is `limit` slots per bucket
//! (one bucket per user and rule, or per user and category). A message may
//! go when it takes a slot whose last use is more than `per` ago; since a
//! slot is reused only after `per`, no `per`-long stretch of time can hold
//! more than `limit` messages (two in it would share a slot). A message
//! that already holds a slot (a retry, or a second instance reading the
//! same inbox row) keeps it instead of taking another.
//!
//! Slots are taken in one transaction per batch that holds the buckets'
//! rows (`FOR UPDATE` on PostgreSQL and MariaDB, the single writer on
//! SQLite), in bucket order, so two instances never hand out the same slot
//! and never wait on each other in a cycle. Rejected: counting the send log
//! in the window (two instances both count two and both send the third),
//! and a counter per fixed period (a burst across the period boundary would
//! get twice the limit).

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use sqlx::Row;

use super::json_rows::{Col, keys_json, to_json};
use super::rows::opt_text;
use super::{Dialect, SqlStore, Store, StoreError};
use crate::clock::Millis;

/// One message asking for a slot.
#[derive(Debug, Clone)]
pub struct SlotRequest {
    /// The bucket: see [`bucket`].
    pub bucket: String,
    pub limit: u32,
    pub per_ms: i64,
    pub outbox_id: String,
}

/// What a [`SlotRequest`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotAnswer {
    Granted,
    /// Every slot was used within the window: the latest use (when the cap
    /// was reached) and when the oldest frees up.
    Capped {
        reached_at: Millis,
        next_free: Millis,
    },
}

/// The bucket of a cap: a SHA-256 (hex) of its scope and the user, so a
/// long user id still fits an indexed column in every dialect.
pub fn bucket(scope: &str, scope_id: &str, user_id: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in [scope, scope_id, user_id] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(h.finalize())
}

#[async_trait]
pub trait ThrottleStore: Send + Sync {
    /// Takes a slot for each request, in order, in one transaction; the
    /// answers are in the requests' order.
    async fn take_throttle_slots(&self, requests: &[SlotRequest], now: Millis) -> Result<Vec<SlotAnswer>, StoreError>;
}

struct Slot {
    used_at: i64,
    outbox_id: Option<String>,
}

#[async_trait]
impl ThrottleStore for SqlStore {
    async fn take_throttle_slots(&self, requests: &[SlotRequest], now: Millis) -> Result<Vec<SlotAnswer>, StoreError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let d = self.dialect();
        let db = StoreError::db;
        // The most slots each bucket needs (two rules of one category may
        // name different limits).
        let mut need: BTreeMap<&str, u32> = BTreeMap::new();
        for r in requests {
            let n = need.entry(r.bucket.as_str()).or_default();
            *n = (*n).max(r.limit);
        }
        let mut tx = self.begin_write().await.map_err(db("throttle: begin"))?;
        let mut slots = read_slots(&mut tx, d, need.keys().copied()).await?;
        let missing: Vec<(&str, i64)> = need
            .iter()
            .flat_map(|(b, n)| {
                let have = slots.get(*b).map_or(0, |s| s.len() as u32);
                (have..*n).map(move |i| (*b, i64::from(i)))
            })
            .collect();
        if !missing.is_empty() {
            let from = d.json_rows(&[("bucket", Col::Key), ("slot", Col::Int)], "s");
            let conflict = match d {
                Dialect::MySql => {
                    " ON DUPLICATE KEY UPDATE engagement_throttle_slots.slot = engagement_throttle_slots.slot"
                        .to_owned()
                }
                _ => " ON CONFLICT (bucket, slot) DO NOTHING".to_owned(),
            };
            // SQLite reads `INSERT … SELECT … ON CONFLICT` as a join
            // constraint unless the SELECT has a WHERE.
            let sql = d.sql(&format!(
                "INSERT INTO engagement_throttle_slots (bucket, slot, used_at, outbox_id) \
                 SELECT s.bucket, s.slot, 0, NULL FROM {from} WHERE true{conflict}"
            ));
            sqlx::query(&sql).bind(to_json(&missing)?).execute(&mut *tx).await.map_err(db("throttle: add slots"))?;
            let buckets: Vec<&str> = missing.iter().map(|(b, _)| *b).collect();
            slots.extend(read_slots(&mut tx, d, buckets.into_iter()).await?);
        }

        let mut answers = Vec::with_capacity(requests.len());
        let mut taken: Vec<(String, i64, i64, String)> = Vec::new();
        for r in requests {
            let bucket = slots.entry(r.bucket.clone()).or_default();
            let n = (r.limit as usize).min(bucket.len());
            let usable = &mut bucket[..n];
            if usable.iter().any(|s| s.outbox_id.as_deref() == Some(r.outbox_id.as_str())) {
                answers.push(SlotAnswer::Granted);
                continue;
            }
            let cutoff = now.0 - r.per_ms;
            match usable.iter_mut().enumerate().find(|(_, s)| s.used_at <= cutoff) {
                Some((i, slot)) => {
                    slot.used_at = now.0;
                    slot.outbox_id = Some(r.outbox_id.clone());
                    taken.push((r.bucket.clone(), i as i64, now.0, r.outbox_id.clone()));
                    answers.push(SlotAnswer::Granted);
                }
                None => {
                    let latest = usable.iter().map(|s| s.used_at).max().unwrap_or(now.0);
                    let oldest = usable.iter().map(|s| s.used_at).min().unwrap_or(now.0);
                    answers.push(SlotAnswer::Capped {
                        reached_at: Millis(latest),
                        next_free: Millis(oldest + r.per_ms + 1),
                    });
                }
            }
        }
        if !taken.is_empty() {
            let cols = [("bucket", Col::Key), ("slot", Col::Int), ("used_at", Col::Int), ("outbox_id", Col::Key)];
            let from = d.json_rows(&cols, "c");
            let sql = match d {
                Dialect::MySql => format!(
                    "UPDATE {from} STRAIGHT_JOIN engagement_throttle_slots t ON t.bucket = c.bucket AND t.slot = c.slot \
                     SET t.used_at = c.used_at, t.outbox_id = c.outbox_id"
                ),
                _ => d.sql(&format!(
                    "UPDATE engagement_throttle_slots AS t SET used_at = c.used_at, outbox_id = c.outbox_id FROM {from} \
                     WHERE t.bucket = c.bucket AND t.slot = c.slot"
                )),
            };
            sqlx::query(&sql).bind(to_json(&taken)?).execute(&mut *tx).await.map_err(db("throttle: take slots"))?;
        }
        tx.commit().await.map_err(db("throttle: commit"))?;
        Ok(answers)
    }
}

/// The slots of these buckets, in slot order, locked for this transaction.
async fn read_slots<'a>(
    conn: &mut sqlx::AnyConnection,
    d: Dialect,
    buckets: impl Iterator<Item = &'a str>,
) -> Result<HashMap<String, Vec<Slot>>, StoreError> {
    let db = StoreError::db;
    let lock = match d {
        Dialect::Sqlite => "",
        // Only the slots: the keys come from a function.
        Dialect::Postgres => " FOR UPDATE OF t",
        Dialect::MySql => " FOR UPDATE",
    };
    let sql = format!(
        "{} ORDER BY t.bucket, t.slot{lock}",
        d.select_by_keys("t.bucket, t.slot, t.used_at, t.outbox_id", "engagement_throttle_slots", "t", "bucket")
    );
    let rows =
        sqlx::query(&sql).bind(keys_json(buckets)?).fetch_all(&mut *conn).await.map_err(db("throttle: read slots"))?;
    let mut out: HashMap<String, Vec<Slot>> = HashMap::new();
    for row in &rows {
        let read = || -> Result<(String, Slot), sqlx::Error> {
            Ok((
                super::rows::text(row, "bucket")?,
                Slot { used_at: row.try_get("used_at")?, outbox_id: opt_text(row, "outbox_id")? },
            ))
        };
        let (bucket, slot) = read().map_err(db("throttle: read slots"))?;
        out.entry(bucket).or_default().push(slot);
    }
    Ok(out)
}
