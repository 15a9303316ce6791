//! Triggers to many: a topic's subscribers or a list of users, recorded at
//! once and expanded into outbox rows a chunk at a time by
//! [`crate::planning::fan_out`], which says why it works as it does.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;

use super::queries::Query;
use super::rows::{Fetch, Run, from_columns, text};
use super::{NewDigestItem, NewOutboxRow, SqlStore, Store, StoreError, TriggerInsert, TriggerRow};
use crate::clock::Millis;
use crate::domain::UserId;

/// Whom a trigger to many reaches.
#[derive(Debug, Clone, PartialEq)]
pub enum Audience {
    /// These users (1 to 1,000; a repeated id counts once).
    Users(Vec<UserId>),
    /// Everyone subscribed to this topic when the trigger was recorded.
    Topic(String),
}

impl Audience {
    /// Its name in `engagement_triggers.audience`.
    pub fn kind(&self) -> &'static str {
        match self {
            Audience::Users(_) => "users",
            Audience::Topic(_) => "topic",
        }
    }
}

/// A trigger to many, to record. `id` is chosen by the caller.
#[derive(Debug, Clone)]
pub struct NewFanOut {
    pub id: String,
    pub trigger_type: String,
    pub audience: Audience,
    pub actor_id: Option<UserId>,
    pub payload: serde_json::Value,
    pub idempotency_key: Option<String>,
    pub request_hash: Option<String>,
    pub occurred_at: Millis,
    pub send_at: Option<Millis>,
}

/// A trigger with its audience and expansion: what the expander works
/// from, and what `GET /v1/triggers/{id}` shows of any trigger.
#[derive(Debug, Clone, Serialize)]
pub struct FanOutRow {
    pub id: String,
    #[serde(rename = "type")]
    pub trigger_type: String,
    /// '' for a trigger to many.
    pub user_id: String,
    pub payload: serde_json::Value,
    pub idempotency_key: Option<String>,
    pub occurred_at: Millis,
    pub created_at: Millis,
    pub planned_at: Option<Millis>,
    pub planned_count: Option<i64>,
    pub plan_detail: Option<String>,
    /// `users`, `topic`, or `None` for one user.
    pub audience: Option<String>,
    pub topic_key: Option<String>,
    pub actor_id: Option<String>,
    pub send_at: Option<Millis>,
    /// The last user id planned; chunks go in user-id order.
    pub expand_cursor: Option<String>,
    /// Recipients planned so far.
    pub expanded_count: i64,
    /// Recipients in all, counted when the expansion started.
    pub audience_size: Option<i64>,
    pub expand_owner: Option<String>,
    pub expand_until: Option<Millis>,
    pub cancelled_at: Option<Millis>,
    pub cancelled_by: Option<String>,
}

from_columns!(FanOutRow: id, trigger_type = "type", user_id, payload, idempotency_key, occurred_at, created_at,
    planned_at, planned_count, plan_detail, audience, topic_key, actor_id, send_at, expand_cursor, expanded_count,
    audience_size, expand_owner, expand_until, cancelled_at, cancelled_by);

impl FanOutRow {
    /// The trigger as a rule sees it, addressed to `user_id`.
    pub fn for_user(&self, user_id: &str) -> TriggerRow {
        TriggerRow {
            id: self.id.clone(),
            trigger_type: self.trigger_type.clone(),
            user_id: user_id.to_owned(),
            payload: self.payload.clone(),
            idempotency_key: self.idempotency_key.clone(),
            request_hash: None,
            occurred_at: self.occurred_at,
            created_at: self.created_at,
            planned_at: self.planned_at,
            planned_count: self.planned_count,
            plan_detail: self.plan_detail.clone(),
            send_at: self.send_at,
            actor_id: self.actor_id.clone(),
            topic_key: self.topic_key.clone(),
        }
    }
}

/// A rule whose rows a chunk plans in the database alone: it has no
/// condition and no digest, so every recipient gets the same row but for
/// the user id. One row of `plan_topic_chunk`'s `rules` array.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkRule {
    pub rule_id: String,
    pub channel: String,
    pub due_at: i64,
    pub expires_at: Option<i64>,
    pub follow_up_at: Option<i64>,
}

/// One chunk of an expansion, planned in one transaction.
pub struct PlanChunk<'a> {
    pub trigger: &'a FanOutRow,
    /// This instance, which must still hold the expansion.
    pub owner: &'a str,
    /// The chunk is the audience in (`after`, `last`].
    pub after: &'a str,
    pub last: &'a str,
    /// The place of the chunk's first recipient in the audience, from 0:
    /// each thousand recipients are due a millisecond after the thousand
    /// before (see `plan_topic_chunk`).
    pub first: i64,
    /// Rules planned by one statement for the whole chunk.
    pub set_rules: &'a [ChunkRule],
    /// Rows of rules evaluated in the process (conditions, digests).
    pub rows: &'a [NewOutboxRow],
    pub digests: &'a [NewDigestItem],
}

/// A trigger's messages in one status and channel, with why not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutcomeCount {
    pub status: String,
    pub channel: String,
    /// For rows that did not go: `opted_out`, `muted`, `capped`,
    /// `no_address`, `suppressed`, or the status (`cancelled`, `expired`,
    /// `failed`); '' otherwise.
    pub reason: String,
    pub count: i64,
}

/// Rows cancelled per transaction by a trigger's cancel.
pub const CANCEL_CHUNK: i64 = 5_000;

#[async_trait]
pub trait FanOutStore: Send + Sync {
    /// Records a trigger to many, unplanned, with its list of users; a taken
    /// idempotency key records nothing and answers the trigger holding it.
    async fn record_fan_out(&self, t: &NewFanOut, now: Millis) -> Result<TriggerInsert, StoreError>;
    /// Any trigger, with its audience and expansion.
    async fn fan_out_state(&self, id: &str) -> Result<Option<FanOutRow>, StoreError>;
    /// Triggers to many that no live instance is expanding, oldest first.
    async fn fan_outs_to_expand(&self, now: Millis, limit: u32) -> Result<Vec<String>, StoreError>;
    /// Takes a trigger's expansion until `until`, if no one holds it.
    async fn take_fan_out(&self, id: &str, owner: &str, now: Millis, until: Millis) -> Result<bool, StoreError>;
    /// Counts the audience and stores the count.
    async fn count_audience(&self, t: &FanOutRow) -> Result<i64, StoreError>;
    /// Up to `limit` user ids of the audience after `after`, in order.
    async fn audience_chunk(&self, t: &FanOutRow, after: &str, limit: u32) -> Result<Vec<String>, StoreError>;
    /// Plans one chunk in one transaction (several may run side by side);
    /// false (and nothing written) if this instance no longer holds the
    /// expansion or the trigger was cancelled. What it planned is counted
    /// once, when the expansion finishes ([`FanOutStore::fan_out_rows`]).
    async fn plan_chunk(&self, chunk: &PlanChunk<'_>, now: Millis) -> Result<bool, StoreError>;
    /// Moves the cursor to `last` once every chunk up to it committed, adds
    /// their `recipients` and renews the lease until `until`; false if
    /// `owner` no longer holds the expansion, or it was cancelled.
    async fn advance_fan_out(
        &self,
        id: &str,
        owner: &str,
        last: &str,
        recipients: i64,
        until: Millis,
    ) -> Result<bool, StoreError>;
    /// A trigger's outbox rows and digest items, counted.
    async fn fan_out_rows(&self, id: &str) -> Result<i64, StoreError>;
    /// The expansion is done: the trigger is planned with `planned` rows
    /// (false if `owner` no longer holds it, or it was cancelled).
    async fn finish_fan_out(
        &self,
        id: &str,
        owner: &str,
        planned: i64,
        detail: &str,
        now: Millis,
    ) -> Result<bool, StoreError>;
    /// Marks a trigger cancelled; false if it already was.
    async fn mark_trigger_cancelled(&self, id: &str, by: &str, now: Millis) -> Result<bool, StoreError>;
    /// A trigger's messages by status, channel and why not.
    async fn trigger_outcomes(&self, id: &str) -> Result<Vec<OutcomeCount>, StoreError>;
}

impl SqlStore {
    /// Ends a trigger's expansion with `end` (finished or cancelled) and, if
    /// `end` changed the trigger, deletes its user list in the same
    /// transaction: a crash between two commits would leave a 'users'
    /// trigger's list (up to 1,000 rows) with nothing left to delete it.
    /// Topic triggers have no list; the delete finds nothing by the key.
    async fn end_expansion<'q>(
        &self,
        op: &'static str,
        end: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
        id: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await.map_err(StoreError::db(op))?;
        let n = end.run(&mut *tx, op).await?;
        if n == 1 {
            sqlx::query(self.sql(Query::ForgetTriggerUsers))
                .bind(id.to_owned())
                .run(&mut *tx, "forget trigger users")
                .await?;
        }
        tx.commit().await.map_err(StoreError::db(op))?;
        Ok(n == 1)
    }
}

#[async_trait]
impl FanOutStore for SqlStore {
    async fn record_fan_out(&self, t: &NewFanOut, now: Millis) -> Result<TriggerInsert, StoreError> {
        let db = StoreError::db;
        let topic = match &t.audience {
            Audience::Topic(key) => Some(key.clone()),
            Audience::Users(_) => None,
        };
        let mut tx = self.begin_write().await.map_err(db("record fan-out: begin"))?;
        sqlx::query(self.sql(Query::InsertFanOutTrigger))
            .bind(t.id.clone())
            .bind(t.trigger_type.clone())
            .bind(t.payload.to_string())
            .bind(t.idempotency_key.clone())
            .bind(t.request_hash.clone())
            .bind(t.occurred_at.0)
            .bind(now.0)
            .bind(t.audience.kind())
            .bind(topic)
            .bind(t.actor_id.as_ref().map(|a| a.as_str().to_owned()))
            .bind(t.send_at.map(|s| s.0))
            .run(&mut *tx, "record fan-out: insert")
            .await?;
        // Which trigger holds the key? Ours, or the first one. (Read back,
        // not told by the row count: MariaDB counts a duplicate's no-op
        // update as a row found.)
        if let Some(key) = &t.idempotency_key {
            let holder: TriggerRow = sqlx::query_as(self.sql(Query::TriggerByIdempotencyKey))
                .bind(key.clone())
                .one(&mut *tx, "record fan-out: read back")
                .await?;
            if holder.id != t.id {
                tx.rollback().await.map_err(db("record fan-out: rollback"))?;
                return Ok(TriggerInsert::Existing(Box::new(holder)));
            }
        }
        if let Audience::Users(ids) = &t.audience {
            let ids: Vec<&str> = ids.iter().map(UserId::as_str).collect();
            sqlx::query(self.sql(Query::InsertTriggerUsers))
                .bind(t.id.clone())
                .bind(super::json_rows::keys_json(ids)?)
                .run(&mut *tx, "record fan-out: users")
                .await?;
        }
        tx.commit().await.map_err(db("record fan-out: commit"))?;
        Ok(TriggerInsert::Created)
    }

    async fn fan_out_state(&self, id: &str) -> Result<Option<FanOutRow>, StoreError> {
        sqlx::query_as(self.sql(Query::FanOutState)).bind(id.to_owned()).optional(self.pool(), "trigger state").await
    }

    async fn fan_outs_to_expand(&self, now: Millis, limit: u32) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(self.sql(Query::FanOutsToExpand))
            .bind(now.0)
            .bind(i64::from(limit))
            .all(self.pool(), "fan-outs to expand")
            .await?;
        rows.iter().map(|r| text(r, "id")).collect::<Result<_, _>>().map_err(StoreError::db("fan-outs to expand"))
    }

    async fn take_fan_out(&self, id: &str, owner: &str, now: Millis, until: Millis) -> Result<bool, StoreError> {
        let n = sqlx::query(self.sql(Query::TakeFanOut))
            .bind(owner.to_owned())
            .bind(until.0)
            .bind(id.to_owned())
            .bind(now.0)
            .run(self.writer(), "take fan-out")
            .await?;
        Ok(n == 1)
    }

    async fn count_audience(&self, t: &FanOutRow) -> Result<i64, StoreError> {
        let query = match t.audience.as_deref() {
            Some("topic") => sqlx::query(self.sql(Query::CountTopicAudience))
                .bind(t.topic_key.clone().unwrap_or_default())
                .bind(t.created_at.0),
            _ => sqlx::query(self.sql(Query::CountUsersAudience)).bind(t.id.clone()),
        };
        let row = query.bind(t.actor_id.clone()).one(self.pool(), "count audience").await?;
        let n: i64 = row.try_get("n").map_err(StoreError::db("count audience"))?;
        sqlx::query(self.sql(Query::SetAudienceSize))
            .bind(n)
            .bind(t.id.clone())
            .run(self.writer(), "count audience: store")
            .await?;
        Ok(n)
    }

    async fn audience_chunk(&self, t: &FanOutRow, after: &str, limit: u32) -> Result<Vec<String>, StoreError> {
        let query = match t.audience.as_deref() {
            Some("topic") => sqlx::query(self.sql(Query::TopicChunk))
                .bind(t.topic_key.clone().unwrap_or_default())
                .bind(after.to_owned())
                .bind(t.created_at.0),
            _ => sqlx::query(self.sql(Query::UsersChunk)).bind(t.id.clone()).bind(after.to_owned()),
        };
        let rows = query.bind(t.actor_id.clone()).bind(i64::from(limit)).all(self.pool(), "audience chunk").await?;
        rows.iter().map(|r| text(r, "user_id")).collect::<Result<_, _>>().map_err(StoreError::db("audience chunk"))
    }

    async fn plan_chunk(&self, c: &PlanChunk<'_>, now: Millis) -> Result<bool, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let t = c.trigger;
        let mut tx = self.begin_write().await.map_err(db("plan chunk: begin"))?;
        // The trigger's row is share-locked for the chunk: a cancel (an
        // update) waits for the chunks in flight, or they see it.
        let held = sqlx::query(self.sql(Query::HoldFanOut))
            .bind(t.id.clone())
            .bind(c.owner.to_owned())
            .optional(&mut *tx, "plan chunk: hold")
            .await?;
        if held.is_none() {
            tx.rollback().await.map_err(db("plan chunk: rollback"))?;
            return Ok(false);
        }
        let mut wrote = false;
        if !c.set_rules.is_empty() {
            let rules: Vec<serde_json::Value> = c
                .set_rules
                .iter()
                .map(|r| serde_json::json!([r.rule_id, r.channel, r.due_at, r.expires_at, r.follow_up_at]))
                .collect();
            let topic = t.audience.as_deref() == Some("topic");
            // The binds both statements share, then each one's range.
            let query = sqlx::query(self.sql(if topic { Query::PlanTopicChunk } else { Query::PlanUsersChunk }))
                .bind(c.first)
                .bind(t.id.clone())
                .bind(t.payload.to_string())
                .bind(now.0)
                .bind(serde_json::Value::Array(rules).to_string());
            let query = match topic {
                true => query
                    .bind(t.topic_key.clone().unwrap_or_default())
                    .bind(c.after.to_owned())
                    .bind(c.last.to_owned())
                    .bind(t.created_at.0),
                false => query.bind(c.after.to_owned()).bind(c.last.to_owned()),
            };
            wrote |= query.bind(t.actor_id.clone()).run(&mut *tx, "plan chunk: rows").await? > 0;
        }
        wrote |= !super::outbox::insert(&mut tx, d, c.rows, false, now).await?.is_empty();
        if !c.digests.is_empty() {
            let digests: Vec<&NewDigestItem> = c.digests.iter().collect();
            wrote |= super::digests::add(&mut tx, d, &digests, now).await? > 0;
        }
        if wrote {
            self.notify_enqueued_in(&mut tx).await?;
        }
        tx.commit().await.map_err(db("plan chunk: commit"))?;
        if wrote {
            self.enqueued_signal().notify_one();
        }
        Ok(true)
    }

    async fn advance_fan_out(
        &self,
        id: &str,
        owner: &str,
        last: &str,
        recipients: i64,
        until: Millis,
    ) -> Result<bool, StoreError> {
        let n = sqlx::query(self.sql(Query::AdvanceFanOut))
            .bind(last.to_owned())
            .bind(recipients)
            .bind(until.0)
            .bind(id.to_owned())
            .bind(owner.to_owned())
            .run(self.writer(), "advance fan-out")
            .await?;
        Ok(n == 1)
    }

    async fn fan_out_rows(&self, id: &str) -> Result<i64, StoreError> {
        let row = sqlx::query(self.sql(Query::CountFanOutRows))
            .bind(id.to_owned())
            .bind(id.to_owned())
            .one(self.pool(), "count fan-out rows")
            .await?;
        row.try_get("n").map_err(StoreError::db("count fan-out rows"))
    }

    async fn finish_fan_out(
        &self,
        id: &str,
        owner: &str,
        planned: i64,
        detail: &str,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let finish = sqlx::query(self.sql(Query::FinishFanOut))
            .bind(now.0)
            .bind(detail.to_owned())
            .bind(planned)
            .bind(id.to_owned())
            .bind(owner.to_owned());
        self.end_expansion("finish fan-out", finish, id).await
    }

    async fn mark_trigger_cancelled(&self, id: &str, by: &str, now: Millis) -> Result<bool, StoreError> {
        let cancel = sqlx::query(self.sql(Query::CancelTrigger)).bind(now.0).bind(by.to_owned()).bind(id.to_owned());
        self.end_expansion("cancel trigger", cancel, id).await
    }

    async fn trigger_outcomes(&self, id: &str) -> Result<Vec<OutcomeCount>, StoreError> {
        let rows = sqlx::query(self.sql(Query::TriggerOutcomes))
            .bind(id.to_owned())
            .all(self.pool(), "trigger outcomes")
            .await?;
        rows.iter()
            .map(|r| {
                Ok(OutcomeCount {
                    status: text(r, "status")?,
                    channel: text(r, "channel")?,
                    reason: text(r, "reason")?,
                    count: r.try_get("n")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("trigger outcomes"))
    }
}
