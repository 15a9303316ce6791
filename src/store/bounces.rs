//! `engagement_bounces`: bounces and complaints kept as evidence, and what
//! recording one does, all in one transaction: the evidence row, a
//! `bounced`/`complained` row in the send log of the message it was matched
//! to, the suppression it calls for, and their events.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;

use super::events::NewEvent;
use super::rows::{Fetch, Run};
use super::rows::{opt_text, text};
use super::suppressions::{SuppressionRow, suppress_in};
use super::{SqlStore, Store, StoreError, new_id};
use crate::clock::Millis;

/// The message a bounce was matched to, and how.
#[derive(Debug, Clone)]
pub struct MatchedSend {
    pub outbox_id: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub user_id: String,
    pub channel: String,
    /// `verp`, `outbox_id_header`, `message_id` or `address_hash`.
    pub matched_by: &'static str,
}

#[derive(Debug, Clone)]
pub struct NewBounce {
    pub fingerprint: String,
    /// `mail` for a raw message; later `ses`, `sendgrid`, …
    pub provider: String,
    /// `hard`, `soft`, `complaint`, `auto_reply` or `delayed`.
    pub kind: String,
    pub address_hash: Option<String>,
    pub status: Option<String>,
    pub reply_code: Option<i64>,
    pub detail: String,
    pub raw_excerpt: String,
    pub matched: Option<MatchedSend>,
    /// The send-log status to append for the matched message: `bounced` or
    /// `complained`, or for an SMS delivery report `delivered` or
    /// `undelivered`; `None` for kinds that change nothing in the send log.
    /// The row is written in the evidence's transaction, after its
    /// fingerprint is found new, so a report the provider retries adds no
    /// second row.
    pub send_status: Option<&'static str>,
    /// The provider's id for the message (Twilio's SM… sid), kept on the
    /// send-log row; `None` where the report does not carry one.
    pub provider_id: Option<String>,
    pub suppress: Option<SuppressionRow>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BounceRow {
    pub id: String,
    pub provider: String,
    pub kind: String,
    pub address_hash: Option<String>,
    pub status: Option<String>,
    pub reply_code: Option<i64>,
    pub detail: Option<String>,
    pub outbox_id: Option<String>,
    pub matched_by: Option<String>,
    pub created_at: String,
}

/// A bounce with the bounded copy of what arrived, for an operator to read.
#[derive(Debug, Clone, Serialize)]
pub struct BounceEvidence {
    #[serde(flatten)]
    pub bounce: BounceRow,
    pub raw_excerpt: Option<String>,
}

#[async_trait]
pub trait BounceStore: Send + Sync {
    /// Records a bounce and its consequences; false (and nothing written)
    /// when the same bounce was recorded before.
    async fn record_bounce(&self, b: &NewBounce, now: Millis) -> Result<bool, StoreError>;
    /// Newest first.
    async fn list_bounces(&self, limit: u32) -> Result<Vec<BounceRow>, StoreError>;
    /// The evidence for one address, newest first, with the raw excerpt.
    async fn bounces_for_address(&self, address_hash: &str, limit: u32) -> Result<Vec<BounceEvidence>, StoreError>;
    /// How many bounces of `kind` for an address were recorded since `since`.
    async fn count_bounces(&self, address_hash: &str, kind: &str, since: Millis) -> Result<i64, StoreError>;
    /// Remembers a signed webhook's token; false if it was seen before.
    async fn remember_token(&self, token: &str, now: Millis) -> Result<bool, StoreError>;
}

#[async_trait]
impl BounceStore for SqlStore {
    async fn record_bounce(&self, b: &NewBounce, now: Millis) -> Result<bool, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let mut tx = self.begin_write().await.map_err(db("record bounce: begin"))?;
        let mut events = Vec::with_capacity(2);
        let exists = sqlx::query(&d.sql("SELECT id FROM engagement_bounces WHERE fingerprint = ?"))
            .bind(b.fingerprint.clone())
            .optional(&mut *tx, "record bounce: dedupe")
            .await?;
        if exists.is_some() {
            tx.rollback().await.map_err(db("record bounce: rollback"))?;
            return Ok(false);
        }
        let insert = d.sql(
            "INSERT INTO engagement_bounces (id, fingerprint, provider, kind, address_hash, status, reply_code, \
             detail, outbox_id, matched_by, raw_excerpt, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        );
        sqlx::query(&insert)
            .bind(new_id())
            .bind(b.fingerprint.clone())
            .bind(b.provider.clone())
            .bind(b.kind.clone())
            .bind(b.address_hash.clone())
            .bind(b.status.clone())
            .bind(b.reply_code)
            .bind(b.detail.clone())
            .bind(b.matched.as_ref().map(|m| m.outbox_id.clone()))
            .bind(b.matched.as_ref().map(|m| m.matched_by.to_owned()))
            .bind(b.raw_excerpt.clone())
            .bind(now.0)
            .run(&mut *tx, "record bounce: insert")
            .await?;
        if let (Some(m), Some(status)) = (&b.matched, b.send_status) {
            let insert_send = d.sql(
                "INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, \
                 address_hash, status, detail, attempts, created_at, provider_id) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
            );
            sqlx::query(&insert_send)
                .bind(super::new_id_at(now))
                .bind(m.outbox_id.clone())
                .bind(m.rule_id.clone())
                .bind(m.trigger_id.clone())
                .bind(m.user_id.clone())
                .bind(m.channel.clone())
                .bind(b.provider.clone())
                .bind(b.address_hash.clone())
                .bind(status)
                .bind(b.detail.clone())
                .bind(now.0)
                .bind(b.provider_id.clone())
                .run(&mut *tx, "record bounce: send log")
                .await?;
            let mut event = serde_json::json!({
                "outbox_id": m.outbox_id, "user_id": m.user_id, "rule_id": m.rule_id, "trigger_id": m.trigger_id,
                "channel": m.channel, "status": status, "detail": b.detail, "address_hash": b.address_hash,
                "matched_by": m.matched_by, "at": now.to_rfc3339(),
            });
            if let Some(id) = &b.provider_id {
                event["provider_id"] = id.as_str().into();
            }
            events.push(NewEvent {
                kind: "outcome",
                user_id: Some(m.user_id.clone()),
                outbox_id: Some(m.outbox_id.clone()),
                data: event,
            });
        }
        if let Some(s) = &b.suppress {
            suppress_in(&mut tx, d, s, &mut events).await?;
        }
        super::events::append(&mut tx, d, &events, now).await?;
        tx.commit().await.map_err(db("record bounce: commit"))?;
        self.signal_events().await;
        Ok(true)
    }

    async fn count_bounces(&self, address_hash: &str, kind: &str, since: Millis) -> Result<i64, StoreError> {
        let sql = self.dialect().sql(
            "SELECT COUNT(*) AS n FROM engagement_bounces WHERE address_hash = ? AND kind = ? AND created_at >= ?",
        );
        let row = sqlx::query(&sql)
            .bind(address_hash.to_owned())
            .bind(kind.to_owned())
            .bind(since.0)
            .one(self.pool(), "count bounces")
            .await?;
        row.try_get::<i64, _>("n").map_err(StoreError::db("count bounces"))
    }

    async fn remember_token(&self, token: &str, now: Millis) -> Result<bool, StoreError> {
        // A plain INSERT, and the unique violation is the answer: every
        // dialect reports it the same way, unlike "affected rows" for an
        // ignored duplicate (MySQL counts those).
        let sql = self.dialect().sql("INSERT INTO engagement_webhook_tokens (token, seen_at) VALUES (?, ?)");
        match sqlx::query(&sql).bind(token.to_owned()).bind(now.0).execute(self.writer()).await {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
            Err(e) => Err(StoreError::Database { op: "remember webhook token", source: e }),
        }
    }

    async fn list_bounces(&self, limit: u32) -> Result<Vec<BounceRow>, StoreError> {
        let sql = self.dialect().sql(
            "SELECT id, provider, kind, address_hash, status, reply_code, detail, outbox_id, matched_by, created_at \
             FROM engagement_bounces ORDER BY created_at DESC, id DESC LIMIT ?",
        );
        let rows = sqlx::query(&sql).bind(i64::from(limit)).all(self.pool(), "list bounces").await?;
        rows.iter().map(bounce_row).collect::<Result<_, sqlx::Error>>().map_err(StoreError::db("list bounces"))
    }

    async fn bounces_for_address(&self, address_hash: &str, limit: u32) -> Result<Vec<BounceEvidence>, StoreError> {
        // Served by engagement_bounces_address (address_hash, kind, created_at).
        let sql = self.dialect().sql(
            "SELECT id, provider, kind, address_hash, status, reply_code, detail, outbox_id, matched_by, created_at, \
             raw_excerpt FROM engagement_bounces WHERE address_hash = ? ORDER BY created_at DESC, id DESC LIMIT ?",
        );
        let rows = sqlx::query(&sql)
            .bind(address_hash.to_owned())
            .bind(i64::from(limit))
            .all(self.pool(), "bounces for address")
            .await?;
        rows.iter()
            .map(|r| Ok(BounceEvidence { bounce: bounce_row(r)?, raw_excerpt: opt_text(r, "raw_excerpt")? }))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("bounces for address"))
    }
}

fn bounce_row(r: &sqlx::any::AnyRow) -> Result<BounceRow, sqlx::Error> {
    Ok(BounceRow {
        id: text(r, "id")?,
        provider: text(r, "provider")?,
        kind: text(r, "kind")?,
        address_hash: opt_text(r, "address_hash")?,
        status: opt_text(r, "status")?,
        reply_code: r.try_get("reply_code")?,
        detail: opt_text(r, "detail")?,
        outbox_id: opt_text(r, "outbox_id")?,
        matched_by: opt_text(r, "matched_by")?,
        created_at: Millis(r.try_get("created_at")?).to_rfc3339(),
    })
}
