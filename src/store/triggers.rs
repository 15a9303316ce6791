//! `engagement_triggers`: what happened to a user, and what the planner made
//! of it.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use std::collections::{HashMap, HashSet};

use super::json_rows::row_as_array;
use super::json_rows::{keys_json, to_json};
use super::queries::Query;
use super::rows::{Fetch, Run};
use super::rows::{from_columns, text};
use super::{Dialect, NewOutboxRow, OutboxRow, SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::UserId;

/// A trigger to record. `id` is chosen by the caller.
#[derive(Debug, Clone)]
pub struct NewTrigger {
    pub id: String,
    pub trigger_type: String,
    pub user_id: UserId,
    pub payload: serde_json::Value,
    pub idempotency_key: Option<String>,
    /// SHA-256 of the request, so a reused idempotency key with a different
    /// body can be told apart from a replay.
    pub request_hash: Option<String>,
    pub occurred_at: Millis,
    /// Nothing of it is due before this (on top of each rule's delay).
    pub send_at: Option<Millis>,
    /// Who caused it: left out of the audience, `actor` in templates.
    pub actor_id: Option<UserId>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TriggerRow {
    pub id: String,
    #[serde(rename = "type")]
    pub trigger_type: String,
    pub user_id: String,
    pub payload: serde_json::Value,
    pub idempotency_key: Option<String>,
    #[serde(skip)]
    pub request_hash: Option<String>,
    pub occurred_at: Millis,
    pub created_at: Millis,
    /// When the planner handled it; `None` while it waits.
    pub planned_at: Option<Millis>,
    pub planned_count: Option<i64>,
    /// Why it planned what it did, in words ("no enabled rule matches …").
    pub plan_detail: Option<String>,
    /// Nothing of it is due before this (on top of each rule's delay).
    pub send_at: Option<Millis>,
    /// Who caused it: left out of the audience, `actor` in templates.
    pub actor_id: Option<String>,
    /// The topic of a trigger to a topic: `trigger.topic` in conditions,
    /// digest keys and templates.
    pub topic_key: Option<String>,
}

from_columns!(TriggerRow: id, trigger_type = "type", user_id, payload, idempotency_key, request_hash, occurred_at,
    created_at, planned_at, planned_count, plan_detail, send_at, actor_id, topic_key);

impl NewTrigger {
    /// The row as stored once inserted, before any planner has seen it.
    pub fn unplanned_row(&self, created_at: Millis) -> TriggerRow {
        TriggerRow {
            id: self.id.clone(),
            trigger_type: self.trigger_type.clone(),
            user_id: self.user_id.as_str().to_owned(),
            payload: self.payload.clone(),
            idempotency_key: self.idempotency_key.clone(),
            request_hash: self.request_hash.clone(),
            occurred_at: self.occurred_at,
            created_at,
            planned_at: None,
            planned_count: None,
            plan_detail: None,
            send_at: self.send_at,
            actor_id: self.actor_id.as_ref().map(|a| a.as_str().to_owned()),
            topic_key: None,
        }
    }
}

/// What a message's delivery needs of its trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerFacts {
    pub occurred_at: Millis,
    /// The topic of a trigger to a topic: a user may have muted it.
    pub topic_key: Option<String>,
    /// `actor` in templates.
    pub actor_id: Option<String>,
}

/// What `insert_trigger` found.
#[derive(Debug, Clone)]
pub enum TriggerInsert {
    Created,
    /// The idempotency key was used before; this is the first trigger.
    Existing(Box<TriggerRow>),
}

/// A trigger to record already planned: the rows its rules planned and the
/// detail that says why, written with it in one transaction.
#[derive(Debug, Clone)]
pub struct PlannedTrigger {
    pub trigger: NewTrigger,
    pub rows: Vec<NewOutboxRow>,
    /// Digests it goes into (see `store::digests`).
    pub digests: Vec<super::NewDigestItem>,
    pub detail: String,
}

/// One planned trigger for [`TriggerStore::plan_triggers`]: a trigger a
/// host inserted, and what to plan for it.
#[derive(Debug, Clone)]
pub struct TriggerPlan {
    pub trigger_id: String,
    pub rows: Vec<NewOutboxRow>,
    pub digests: Vec<super::NewDigestItem>,
    pub detail: String,
}

#[async_trait]
pub trait TriggerStore: Send + Sync {
    async fn insert_trigger(&self, t: &NewTrigger, now: Millis) -> Result<TriggerInsert, StoreError>;
    /// Records triggers with their plans, all in one transaction: each
    /// trigger is inserted already planned and its rows with it. A trigger
    /// whose idempotency key is taken (before, or earlier in `triggers`)
    /// writes nothing and answers the trigger holding the key.
    async fn accept_triggers(&self, triggers: &[PlannedTrigger], now: Millis)
    -> Result<Vec<TriggerInsert>, StoreError>;
    /// Marks host-inserted triggers planned and inserts their rows, all in
    /// one transaction; a trigger another planner marked first is left alone
    /// (false). A compare-and-set on `planned_at`, so each trigger is
    /// planned once however many planners sweep.
    async fn plan_triggers(&self, plans: &[TriggerPlan], now: Millis) -> Result<Vec<bool>, StoreError>;
    async fn get_trigger(&self, id: &str) -> Result<Option<TriggerRow>, StoreError>;
    /// When each of these triggers happened, its topic and its actor (those
    /// that exist), in one query.
    async fn trigger_times(&self, ids: &[&str]) -> Result<Vec<(String, TriggerFacts)>, StoreError>;
    /// Which of these triggers are recorded, as seen after every commit the
    /// cluster acknowledged: the in-doubt check of a batch whose commit got
    /// no answer. The connection that committed is gone, so the read runs
    /// on another, which on Galera may be another node; there it waits
    /// until that node has applied everything the cluster committed before
    /// reading (`wsrep_sync_wait = 1`, for this statement only). A plain
    /// read elsewhere: PostgreSQL and SQLite read from the one primary.
    async fn recorded_triggers(&self, ids: &[&str]) -> Result<Vec<String>, StoreError>;
    /// Triggers the planner has not handled, oldest first.
    async fn unplanned_triggers(&self, limit: u32) -> Result<Vec<TriggerRow>, StoreError>;
    async fn outbox_for_trigger(&self, trigger_id: &str) -> Result<Vec<OutboxRow>, StoreError>;
    /// The most recent triggers of a type, newest first (rule previews).
    async fn recent_triggers(&self, trigger_type: &str, limit: u32) -> Result<Vec<TriggerRow>, StoreError>;
    /// A user's triggers, newest first.
    async fn triggers_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<TriggerRow>, StoreError>;
}

row_as_array! {
    /// One trigger as `accept_triggers` reads it, as one row of its JSON
    /// array (see [`NewTrigger`] for what each field means).
    #[derive(Debug)]
    struct TriggerJson<'a> {
        /// Chosen by the caller.
        id: &'a str,
        /// What happened (`type`).
        trigger_type: &'a str,
        /// To whom.
        user_id: &'a str,
        /// The trigger's JSON, as text.
        payload: String,
        /// The caller's key: a second trigger with it is not recorded.
        idempotency_key: Option<&'a str>,
        /// A hash of the request that carried it, to tell a replay from a
        /// different request reusing the key.
        request_hash: Option<&'a str>,
        /// When it happened.
        occurred_at: i64,
        /// Outbox rows and digest items planned from it.
        planned_count: i64,
        /// What the planner made of it, in words.
        plan_detail: &'a str,
        /// Nothing of it due before this.
        send_at: Option<i64>,
        /// Who caused it.
        actor_id: Option<&'a str>,
    }
}

row_as_array! {
    /// One trigger's plan, as one row of `plan_triggers`'s JSON array.
    #[derive(Debug)]
    struct PlanJson<'a> {
        /// The trigger.
        id: &'a str,
        /// Outbox rows and digest items planned from it.
        planned_count: i64,
        /// What the planner made of it, in words.
        plan_detail: &'a str,
    }
}

#[async_trait]
impl TriggerStore for SqlStore {
    async fn insert_trigger(&self, t: &NewTrigger, now: Millis) -> Result<TriggerInsert, StoreError> {
        sqlx::query(self.sql(Query::InsertTrigger))
            .bind(t.id.clone())
            .bind(t.trigger_type.clone())
            .bind(t.user_id.as_str().to_owned())
            .bind(t.payload.to_string())
            .bind(t.idempotency_key.clone())
            .bind(t.request_hash.clone())
            .bind(t.occurred_at.0)
            .bind(now.0)
            .run(self.writer(), "insert trigger")
            .await?;
        let Some(key) = &t.idempotency_key else { return Ok(TriggerInsert::Created) };
        // Which trigger holds the key? Ours, or the first one.
        let holder: TriggerRow = sqlx::query_as(self.sql(Query::TriggerByIdempotencyKey))
            .bind(key.clone())
            .one(self.pool(), "insert trigger: read back")
            .await?;
        Ok(if holder.id == t.id { TriggerInsert::Created } else { TriggerInsert::Existing(Box::new(holder)) })
    }

    async fn accept_triggers(
        &self,
        triggers: &[PlannedTrigger],
        now: Millis,
    ) -> Result<Vec<TriggerInsert>, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        // Within the batch, the first trigger with a key is the one recorded.
        let mut first_with_key: HashMap<&str, usize> = HashMap::new();
        let mut candidates = Vec::with_capacity(triggers.len());
        for (i, p) in triggers.iter().enumerate() {
            match p.trigger.idempotency_key.as_deref() {
                Some(key) if first_with_key.contains_key(key) => {}
                Some(key) => {
                    first_with_key.insert(key, i);
                    candidates.push(i);
                }
                None => candidates.push(i),
            }
        }
        let mut tx = self.begin_write().await.map_err(db("accept triggers: begin"))?;
        let json: Vec<TriggerJson> = candidates
            .iter()
            .map(|&i| {
                let p = &triggers[i];
                let t = &p.trigger;
                TriggerJson {
                    id: &t.id,
                    trigger_type: &t.trigger_type,
                    user_id: t.user_id.as_str(),
                    payload: t.payload.to_string(),
                    idempotency_key: t.idempotency_key.as_deref(),
                    request_hash: t.request_hash.as_deref(),
                    occurred_at: t.occurred_at.0,
                    planned_count: (p.rows.len() + p.digests.len()) as i64,
                    plan_detail: &p.detail,
                    send_at: t.send_at.map(|s| s.0),
                    actor_id: t.actor_id.as_ref().map(UserId::as_str),
                }
            })
            .collect();
        let query = sqlx::query(self.sql(Query::AcceptTriggers)).bind(now.0).bind(now.0).bind(to_json(&json)?);
        let inserted: Option<HashSet<String>> = if d == Dialect::MySql {
            query.run(&mut *tx, "accept triggers: insert").await?;
            None
        } else {
            let rows = query.all(&mut *tx, "accept triggers: insert").await?;
            Some(rows.iter().map(|r| text(r, "id")).collect::<Result<_, _>>().map_err(db("accept triggers: insert"))?)
        };
        // Who holds each key: this batch's first trigger, or one recorded
        // before (by another request, or another instance just now).
        let mut holders: HashMap<String, TriggerRow> = HashMap::new();
        let keyed: Vec<&str> = first_with_key.keys().copied().collect();
        let any_lost = inserted.as_ref().is_none_or(|ids| ids.len() < candidates.len());
        if !keyed.is_empty() && any_lost {
            let rows: Vec<TriggerRow> = sqlx::query_as(self.sql(Query::TriggersByIdempotencyKeys))
                .bind(keys_json(keyed)?)
                .all(&mut *tx, "accept triggers: read keys")
                .await?;
            for holder in rows {
                if let Some(key) = holder.idempotency_key.clone() {
                    holders.insert(key, holder);
                }
            }
        }
        let created = |i: usize| {
            let t = &triggers[i].trigger;
            match (&inserted, &t.idempotency_key) {
                (Some(ids), _) => ids.contains(&t.id),
                (None, None) => true,
                (None, Some(key)) => holders.get(key).is_some_and(|h| h.id == t.id),
            }
        };
        let rows: Vec<NewOutboxRow> =
            candidates.iter().filter(|&&i| created(i)).flat_map(|&i| triggers[i].rows.iter().cloned()).collect();
        super::outbox::insert(&mut tx, d, &rows, true, now).await?;
        let digests: Vec<&super::NewDigestItem> =
            candidates.iter().filter(|&&i| created(i)).flat_map(|&i| triggers[i].digests.iter()).collect();
        let opened = if digests.is_empty() { 0 } else { super::digests::add(&mut tx, d, &digests, now).await? };
        if !rows.is_empty() || opened > 0 {
            self.notify_enqueued_in(&mut tx).await?;
        }
        tx.commit().await.map_err(db("accept triggers: commit"))?;
        if !rows.is_empty() || opened > 0 {
            self.enqueued_signal().notify_one();
        }
        Ok(triggers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let key = p.trigger.idempotency_key.as_deref();
                let first = key.and_then(|k| first_with_key.get(k).copied());
                if first.is_none_or(|f| f == i) && created(i) {
                    return TriggerInsert::Created;
                }
                // A key taken before this batch, or by this batch's first.
                match key.and_then(|k| holders.get(k)) {
                    Some(holder) => TriggerInsert::Existing(Box::new(holder.clone())),
                    None => {
                        let f = &triggers[first.expect("a trigger that was not created has a key")];
                        let mut row = f.trigger.unplanned_row(now);
                        (row.planned_at, row.planned_count, row.plan_detail) =
                            (Some(now), Some((f.rows.len() + f.digests.len()) as i64), Some(f.detail.clone()));
                        TriggerInsert::Existing(Box::new(row))
                    }
                }
            })
            .collect())
    }

    async fn plan_triggers(&self, plans: &[TriggerPlan], now: Millis) -> Result<Vec<bool>, StoreError> {
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        let d = self.dialect();
        let db = StoreError::db;
        let json: Vec<PlanJson> = plans
            .iter()
            .map(|p| PlanJson {
                id: &p.trigger_id,
                planned_count: (p.rows.len() + p.digests.len()) as i64,
                plan_detail: &p.detail,
            })
            .collect();
        let json = to_json(&json)?;
        let mut tx = self.begin_write().await.map_err(db("plan triggers: begin"))?;
        // The compare-and-set on planned_at decides which planner owns each
        // trigger; the loser writes nothing for it.
        let mark = sqlx::query(self.sql(Query::PlanTriggers)).bind(json.clone()).bind(now.0);
        let won: Vec<AnyRow> = if d.has_update_returning() {
            mark.all(&mut *tx, "plan triggers: mark").await?
        } else {
            let rows =
                sqlx::query(self.sql(Query::LockUnplanned)).bind(json).all(&mut *tx, "plan triggers: lock").await?;
            mark.run(&mut *tx, "plan triggers: mark").await?;
            rows
        };
        let won: HashSet<String> =
            won.iter().map(|r| text(r, "id")).collect::<Result<_, _>>().map_err(db("plan triggers: read ids"))?;
        let rows: Vec<NewOutboxRow> =
            plans.iter().filter(|p| won.contains(&p.trigger_id)).flat_map(|p| p.rows.iter().cloned()).collect();
        // Not `fresh`: a host may reuse a trigger id, and the dedupe key
        // then holds the earlier row.
        let enqueued = super::outbox::insert(&mut tx, d, &rows, false, now).await?;
        let digests: Vec<&super::NewDigestItem> =
            plans.iter().filter(|p| won.contains(&p.trigger_id)).flat_map(|p| p.digests.iter()).collect();
        let opened = if digests.is_empty() { 0 } else { super::digests::add(&mut tx, d, &digests, now).await? };
        let any_created = enqueued.iter().any(|e| e.created) || opened > 0;
        if any_created {
            self.notify_enqueued_in(&mut tx).await?;
        }
        tx.commit().await.map_err(db("plan triggers: commit"))?;
        if any_created {
            self.enqueued_signal().notify_one();
        }
        Ok(plans.iter().map(|p| won.contains(&p.trigger_id)).collect())
    }

    async fn get_trigger(&self, id: &str) -> Result<Option<TriggerRow>, StoreError> {
        sqlx::query_as(self.sql(Query::GetTrigger)).bind(id.to_owned()).optional(self.pool(), "get trigger").await
    }

    async fn trigger_times(&self, ids: &[&str]) -> Result<Vec<(String, TriggerFacts)>, StoreError> {
        // A fan-out's batch is a thousand rows of one trigger: ask once.
        let ids: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.sql(Query::TriggerTimes))
            // Planned at every execution on PostgreSQL: see queries/postgres/README.md.
            .persistent(self.dialect() != Dialect::Postgres)
            .bind(keys_json(ids.iter().copied())?)
            .all(self.pool(), "trigger times")
            .await?;
        rows.iter()
            .map(|r| {
                let facts = TriggerFacts {
                    occurred_at: Millis(r.try_get("occurred_at")?),
                    topic_key: super::rows::opt_text(r, "topic_key")?,
                    actor_id: super::rows::opt_text(r, "actor_id")?,
                };
                Ok((text(r, "id")?, facts))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("trigger times"))
    }

    async fn recorded_triggers(&self, ids: &[&str]) -> Result<Vec<String>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys = keys_json(ids.iter().copied())?;
        let plain = || sqlx::query(self.sql(Query::RecordedTriggers)).bind(keys.clone()).fetch_all(self.pool());
        let rows = match self.dialect() {
            Dialect::MySql => {
                match sqlx::query(self.sql(Query::RecordedTriggersSynced))
                    .bind(keys.clone())
                    .fetch_all(self.pool())
                    .await
                {
                    // MySQL has neither the syntax (1064) nor the variable (1193).
                    Err(sqlx::Error::Database(e)) if matches!(super::mysql_number(e.as_ref()), Some(1064 | 1193)) => {
                        plain().await
                    }
                    other => other,
                }
            }
            _ => plain().await,
        }
        .map_err(StoreError::db("check recorded triggers"))?;
        rows.iter()
            .map(|r| text(r, "id"))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("check recorded triggers"))
    }

    async fn unplanned_triggers(&self, limit: u32) -> Result<Vec<TriggerRow>, StoreError> {
        sqlx::query_as(self.sql(Query::UnplannedTriggers))
            .bind(i64::from(limit))
            .all(self.pool(), "unplanned triggers")
            .await
    }

    async fn outbox_for_trigger(&self, trigger_id: &str) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = sqlx::query(self.sql(Query::OutboxForTrigger))
            .bind(trigger_id.to_owned())
            .all(self.pool(), "outbox rows for trigger")
            .await?;
        rows.iter().map(OutboxRow::from_any).collect()
    }

    async fn recent_triggers(&self, trigger_type: &str, limit: u32) -> Result<Vec<TriggerRow>, StoreError> {
        sqlx::query_as(self.sql(Query::RecentTriggers))
            .bind(trigger_type.to_owned())
            .bind(i64::from(limit))
            .all(self.pool(), "recent triggers")
            .await
    }

    async fn triggers_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<TriggerRow>, StoreError> {
        sqlx::query_as(self.sql(Query::TriggersForUser))
            .bind(user_id.as_str().to_owned())
            .bind(i64::from(limit))
            .all(self.pool(), "triggers for user")
            .await
    }
}
