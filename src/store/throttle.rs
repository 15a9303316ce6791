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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use sqlx::Row;

use super::json_rows::{keys_json, row_as_array, to_json};
use super::queries::Query;
use super::rows::opt_text;
use super::rows::{Fetch, Run};
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
    /// One transaction, tried again when it loses a race: takers of one
    /// bucket lock its slot rows, and concurrent ones (the deliveries of
    /// an `sms.rate`, several instances' caps) deadlock on InnoDB now and
    /// then; the loser's transaction did nothing.
    async fn take_throttle_slots(&self, requests: &[SlotRequest], now: Millis) -> Result<Vec<SlotAnswer>, StoreError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        super::race::retry_lost_race("take throttle slots", || self.take_slots_once(requests, now)).await
    }
}

impl SqlStore {
    async fn take_slots_once(&self, requests: &[SlotRequest], now: Millis) -> Result<Vec<SlotAnswer>, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        if d == Dialect::Sqlite
            && let Some(answers) = self.take_known_slots(requests, now).await?
        {
            return Ok(answers);
        }
        let mut tx = self.begin_write().await.map_err(db("throttle: begin"))?;
        // Each bucket once, in bucket order: the order rows are locked in.
        let buckets: BTreeSet<&str> = requests.iter().map(|r| r.bucket.as_str()).collect();
        let mut slots = read_slots(&mut tx, d, buckets.into_iter()).await?;
        // Slots are made as they are needed, not `limit` at once: a bucket
        // that sees one message a day holds one row, and a batch reads and
        // locks only the slots its users have used. Another instance may add
        // the same slot meanwhile (its insert is then ignored here); reading
        // the bucket again shows it, and the next round adds what is still
        // short. Every round adds or finds at least one slot per short
        // bucket, so this ends within `limit` rounds (one in practice).
        for _round in 0..=MAX_LIMIT {
            let missing = missing_slots(requests, &slots, now);
            if missing.is_empty() {
                break;
            }
            let missing_rows: Vec<SlotKey> = missing.iter().map(|&(bucket, slot)| SlotKey { bucket, slot }).collect();
            sqlx::query(Query::AddThrottleSlots.sql(d))
                .bind(to_json(&missing_rows)?)
                .run(&mut *tx, "throttle: add slots")
                .await?;
            let buckets: BTreeSet<&str> = missing.iter().map(|(b, _)| *b).collect();
            slots.extend(read_slots(&mut tx, d, buckets.into_iter()).await?);
        }

        let (answers, taken) = assign(requests, &mut slots, now);
        if !taken.is_empty() {
            let rows: Vec<TakenSlot> = taken
                .iter()
                .map(|(bucket, slot, used_at, outbox_id)| TakenSlot {
                    bucket,
                    slot: *slot,
                    used_at: *used_at,
                    outbox_id,
                })
                .collect();
            sqlx::query(Query::TakeThrottleSlots.sql(d))
                .bind(to_json(&rows)?)
                .run(&mut *tx, "throttle: take slots")
                .await?;
        }
        tx.commit().await.map_err(db("throttle: commit"))?;
        Ok(answers)
    }
}

impl SqlStore {
    /// SQLite's usual case in one write statement: the slots are read
    /// outside the write lock and assigned here (slots a bucket lacks are
    /// added as in the locked path), then written by one upsert that
    /// changes all of them or none: each slot only if it is still as it
    /// was read (its use and its message), each new one only if nobody
    /// added it meanwhile. `None` sends the batch down the locked path:
    /// a message would be capped (its answer is then read under the lock),
    /// or another writer changed a slot since it was read.
    ///
    /// Why: on SQLite every write waits for the one writer, and the locked
    /// path holds it for four to six statements per delivery batch, during
    /// which the API's triggers wait too. A statement is atomic under
    /// SQLite's write lock, so the count in its `WHERE` and its changes
    /// agree.
    async fn take_known_slots(
        &self,
        requests: &[SlotRequest],
        now: Millis,
    ) -> Result<Option<Vec<SlotAnswer>>, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let buckets: BTreeSet<&str> = requests.iter().map(|r| r.bucket.as_str()).collect();
        let mut conn = self.pool().acquire().await.map_err(db("throttle: read slots"))?;
        let mut slots = read_slots(&mut conn, d, buckets.into_iter()).await?;
        drop(conn);
        // What each slot was when read: `None` for one added here.
        let mut read: HashMap<(String, i64), Option<(i64, String)>> = slots
            .iter()
            .flat_map(|(b, v)| {
                v.iter()
                    .enumerate()
                    .map(|(i, s)| ((b.clone(), i as i64), Some((s.used_at, s.outbox_id.clone().unwrap_or_default()))))
            })
            .collect();
        for (bucket, slot) in missing_slots(requests, &slots, now) {
            slots.entry(bucket.to_owned()).or_default().push(Slot { used_at: 0, outbox_id: None });
            read.insert((bucket.to_owned(), slot), None);
        }
        let (answers, taken) = assign(requests, &mut slots, now);
        if answers.iter().any(|a| matches!(a, SlotAnswer::Capped { .. })) {
            return Ok(None);
        }
        if taken.is_empty() {
            return Ok(Some(answers));
        }
        let mut changes = Vec::with_capacity(taken.len());
        for (bucket, slot, used_at, outbox_id) in &taken {
            let Some(was) = read.get(&(bucket.clone(), *slot)) else { return Ok(None) };
            let (added, was_used, was_for) = match was {
                Some((used, r#for)) => (0, *used, r#for.as_str()),
                None => (1, 0, ""),
            };
            changes.push(KnownSlot { bucket, slot: *slot, used_at: *used_at, outbox_id, added, was_used, was_for });
        }
        let done = sqlx::query(Query::TakeKnownThrottleSlots.sql(d))
            .bind(to_json(&changes)?)
            .bind(changes.len() as i64)
            .run(self.writer(), "throttle: take slots")
            .await?;
        Ok((done == changes.len() as u64).then_some(answers))
    }
}

/// A slot taken: bucket, slot, its new use and the message using it.
type Taken = (String, i64, i64, String);

row_as_array! {
    /// A slot to add, as `add_throttle_slots` reads it.
    struct SlotKey<'a> {
        bucket: &'a str,
        slot: i64,
    }
}

row_as_array! {
    /// A slot taken, as `take_throttle_slots` reads it.
    struct TakenSlot<'a> {
        bucket: &'a str,
        slot: i64,
        /// The slot's new use: now.
        used_at: i64,
        /// The message that holds it.
        outbox_id: &'a str,
    }
}

row_as_array! {
    /// A slot taken outside the write lock, as `take_known_throttle_slots`
    /// reads it: [`TakenSlot`]'s fields, then what the slot was when read.
    struct KnownSlot<'a> {
        bucket: &'a str,
        slot: i64,
        used_at: i64,
        outbox_id: &'a str,
        /// 1 if this batch adds the slot (nobody may have made it since).
        added: i64,
        /// The slot's use when read.
        was_used: i64,
        /// The slot's message when read, `""` for none.
        was_for: &'a str,
    }
}

/// Answers the requests in order from `slots` (updated as slots are
/// taken), and lists the slots taken.
fn assign(
    requests: &[SlotRequest],
    slots: &mut HashMap<String, Vec<Slot>>,
    now: Millis,
) -> (Vec<SlotAnswer>, Vec<Taken>) {
    let mut answers = Vec::with_capacity(requests.len());
    let mut taken: Vec<Taken> = Vec::new();
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
                answers
                    .push(SlotAnswer::Capped { reached_at: Millis(latest), next_free: Millis(oldest + r.per_ms + 1) });
            }
        }
    }
    (answers, taken)
}

/// The largest `limit` a cap may have (rule validation refuses more).
const MAX_LIMIT: u32 = crate::planning::workflow::MAX_THROTTLE_LIMIT as u32;

/// The slots to add so every request that holds none can be answered:
/// per bucket, one for each such request beyond the slots free now (free
/// by the longest window asked of the bucket, so never too few), up to
/// the bucket's largest limit. Slot numbers continue from the bucket's
/// last.
fn missing_slots<'a>(
    requests: &'a [SlotRequest],
    slots: &HashMap<String, Vec<Slot>>,
    now: Millis,
) -> Vec<(&'a str, i64)> {
    // Per bucket: the largest limit, the longest window, and the requests
    // that hold no slot yet.
    let mut wanted: BTreeMap<&str, (u32, i64, u32)> = BTreeMap::new();
    for r in requests {
        let held = slots
            .get(&r.bucket)
            .is_some_and(|s| s.iter().any(|slot| slot.outbox_id.as_deref() == Some(r.outbox_id.as_str())));
        let w = wanted.entry(r.bucket.as_str()).or_default();
        w.0 = w.0.max(r.limit.min(MAX_LIMIT));
        w.1 = w.1.max(r.per_ms);
        w.2 += u32::from(!held);
    }
    let mut out = Vec::new();
    for (bucket, (limit, per_ms, asking)) in wanted {
        let have = slots.get(bucket).map_or(&[][..], Vec::as_slice);
        let free = have.iter().filter(|s| s.used_at <= now.0 - per_ms).count() as u32;
        let len = have.len() as u32;
        let target = limit.min(len + asking.saturating_sub(free));
        out.extend((len..target).map(|i| (bucket, i64::from(i))));
    }
    out
}

/// The slots of these buckets, in slot order, locked for this transaction.
async fn read_slots<'a>(
    conn: &mut sqlx::AnyConnection,
    d: Dialect,
    buckets: impl Iterator<Item = &'a str>,
) -> Result<HashMap<String, Vec<Slot>>, StoreError> {
    let db = StoreError::db;
    let rows = sqlx::query(Query::ReadThrottleSlots.sql(d))
        .bind(keys_json(buckets)?)
        .all(&mut *conn, "throttle: read slots")
        .await?;
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
