//! Digests: a burst of triggers for one user folded into one message.
//!
//! `engagement_digests` holds, per bucket (rule, user and digest key), the
//! digest message currently open; `engagement_digest_items` which trigger
//! went into which digest message. The digest message is an ordinary
//! outbox row, due when its window closes (or at once when it reaches
//! `max_items`), so it is delivered, retried, expired and recorded like any
//! other: a crash between planning and delivery loses and doubles nothing.
//!
//! Adding a trigger runs in the planner's transaction and holds the
//! bucket's row (`FOR UPDATE`; SQLite has one writer), so two planners
//! never open two digests for one window. It joins the open digest only by
//! a compare-and-set on that outbox row still being `scheduled`, which also
//! moves the row's `updated_at`: a worker that claimed the row first makes
//! the trigger open the next digest, and a worker that read the row before
//! (the inbox lane compares `updated_at` when it records) loses its
//! compare-and-set and reads the row again with the new item. So a trigger
//! is in exactly one digest (the primary key on trigger and rule says so
//! too) and every digest message carries every trigger it was given.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::{AnyConnection, Row};

use super::queries::Query;
use super::rows::{Fetch, Run};
use super::rows::{from_columns, text};
use super::{Dialect, NewOutboxRow, SqlStore, StoreError};
use crate::clock::Millis;
use crate::domain::{ChannelName, UserId};
use crate::planning::digest::DigestClose;

/// One trigger going into a digest, as the planner decided it.
#[derive(Debug, Clone)]
pub struct NewDigestItem {
    /// SHA-256 of the rule, the user and the digest key's value.
    pub bucket: String,
    pub rule_id: String,
    pub trigger_id: String,
    pub user_id: UserId,
    pub channel: ChannelName,
    pub payload: serde_json::Value,
    /// Orders the items and is shown in them; the window is Herald's own
    /// clock (see `crate::planning::digest`).
    pub occurred_at: Millis,
    /// When a digest this trigger opens closes, from its opening.
    pub close: DigestClose,
    pub max_items: i64,
    pub delay_ms: i64,
    pub grace_ms: Option<i64>,
    /// The trigger reaches many users (a topic, a list): the digest it
    /// opens is one per user, not one per trigger.
    pub to_many: bool,
}

/// A trigger in a digest message.
#[derive(Debug, Clone, Serialize)]
pub struct DigestItemRow {
    pub outbox_id: String,
    pub trigger_id: String,
    pub payload: serde_json::Value,
    pub occurred_at: Millis,
}

from_columns!(DigestItemRow: outbox_id, trigger_id, payload, occurred_at);

/// The digest message a trigger went into, as it is now: the answer to
/// "where did my trigger go" when it planned no message of its own.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DigestMembership {
    /// The digest message's outbox id (as in `GET /v1/users/{id}/sends`).
    pub digest_id: String,
    pub rule_id: String,
    pub channel: String,
    /// The digest message's status now: `scheduled` while it collects
    /// triggers and waits to go out.
    pub status: String,
    /// When it goes out (RFC 3339): when its window or schedule closes,
    /// at once when it is full, or later if a send window holds it.
    pub due_at: String,
    /// Triggers in it so far, this one included.
    pub items: i64,
}

#[async_trait]
pub trait DigestStore: Send + Sync {
    /// The triggers in these digest messages, oldest first per message.
    async fn digest_items(&self, outbox_ids: &[&str]) -> Result<Vec<DigestItemRow>, StoreError>;
    /// The digests this trigger went into (one per digest rule it matched).
    async fn digests_of_trigger(&self, trigger_id: &str) -> Result<Vec<DigestMembership>, StoreError>;
}

#[async_trait]
impl DigestStore for SqlStore {
    async fn digest_items(&self, outbox_ids: &[&str]) -> Result<Vec<DigestItemRow>, StoreError> {
        let rows = self.read_by_keys(Query::DigestItems, outbox_ids, "digest items").await?;
        rows.iter().map(sqlx::FromRow::from_row).collect::<Result<_, _>>().map_err(StoreError::db("digest items"))
    }

    async fn digests_of_trigger(&self, trigger_id: &str) -> Result<Vec<DigestMembership>, StoreError> {
        let rows = sqlx::query(self.sql(Query::DigestsOfTrigger))
            .bind(trigger_id.to_owned())
            .all(self.pool(), "digests of trigger")
            .await?;
        rows.iter()
            .map(|r| {
                Ok(DigestMembership {
                    digest_id: text(r, "outbox_id")?,
                    rule_id: text(r, "rule_id")?,
                    channel: text(r, "channel")?,
                    status: text(r, "status")?,
                    due_at: Millis(r.try_get("due_at")?).to_rfc3339(),
                    items: r.try_get("items")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("digests of trigger"))
    }
}

/// Adds each item to its bucket's open digest, or opens the next one, in
/// the caller's transaction. Returns how many digest messages it created.
pub(super) async fn add(
    conn: &mut AnyConnection,
    d: Dialect,
    items: &[&NewDigestItem],
    now: Millis,
) -> Result<usize, StoreError> {
    let db = StoreError::db;
    // Bucket order: two planners holding several buckets take them in the
    // same order, so neither waits on the other in a cycle.
    let mut items: Vec<&NewDigestItem> = items.to_vec();
    items.sort_by(|a, b| (&a.bucket, a.occurred_at, &a.trigger_id).cmp(&(&b.bucket, b.occurred_at, &b.trigger_id)));
    let mut opened = 0;
    for item in items {
        let exists = sqlx::query(Query::DigestItemOfRule.sql(d))
            .bind(item.trigger_id.clone())
            .bind(item.rule_id.clone())
            .bind(item.user_id.as_str().to_owned())
            .optional(&mut *conn, "digest: find item")
            .await?;
        if exists.is_some() {
            continue; // already in a digest of this rule
        }
        // Retention deletes closed buckets: one it deleted between this
        // insert (which found it, and on PostgreSQL does not lock it) and
        // the read is simply made again.
        let mut open = None;
        for _ in 0..3 {
            sqlx::query(Query::CreateDigestBucket.sql(d))
                .bind(item.bucket.clone())
                .run(&mut *conn, "digest: bucket")
                .await?;
            open = sqlx::query(Query::ReadDigestBucket.sql(d))
                .bind(item.bucket.clone())
                .optional(&mut *conn, "digest: read bucket")
                .await?;
            if open.is_some() {
                break;
            }
        }
        let open = open.ok_or_else(|| db("digest: read bucket")(sqlx::Error::RowNotFound))?;
        let read = || -> Result<(String, i64, i64), sqlx::Error> {
            Ok((text(&open, "outbox_id")?, open.try_get("opened_at")?, open.try_get("items")?))
        };
        let (outbox_id, opened_at, count) = read().map_err(db("digest: read bucket"))?;
        // Open until it closes on Herald's clock; `now` is the database's
        // time, the one the worker reads to find the digest due.
        let in_window = !outbox_id.is_empty() && now < item.close.closes_at(Millis(opened_at));
        if in_window && count < item.max_items {
            let closing = count + 1 >= item.max_items;
            // The compare-and-set that decides whether the open digest is
            // still open; it moves updated_at (by at least 1 ms, whatever
            // the clock says) so a reader of the row's old version loses.
            let joined = sqlx::query(Query::JoinDigest.sql(d))
                .bind(now.0)
                .bind(now.0)
                .bind(i64::from(closing))
                .bind(now.0)
                .bind(now.0)
                .bind(outbox_id.clone())
                .run(&mut *conn, "digest: join")
                .await?
                == 1;
            if joined {
                insert_item(conn, d, item, &outbox_id, now).await?;
                sqlx::query(Query::CountDigestItem.sql(d))
                    .bind(item.bucket.clone())
                    .run(&mut *conn, "digest: count")
                    .await?;
                continue;
            }
        }
        // Open the next digest: this trigger is its first, and it opens now.
        let closes_at = if item.max_items <= 1 { now } else { item.close.closes_at(now) };
        let due_at = Millis(closes_at.0.saturating_add(item.delay_ms));
        let row = NewOutboxRow {
            id: super::new_id(),
            // A value, not SQL: one digest message per (rule, first
            // trigger), and per user for a trigger to many.
            dedupe_key: if item.to_many {
                crate::planning::fan_out::prefixed_dedupe_key(
                    "digest:",
                    d == Dialect::MySql,
                    &item.trigger_id,
                    &item.rule_id,
                    item.user_id.as_str(),
                )
            } else {
                format!("digest:{}:{}", item.rule_id, item.trigger_id)
            },
            rule_id: Some(item.rule_id.clone()),
            trigger_id: Some(item.trigger_id.clone()),
            user_id: item.user_id.clone(),
            channel: item.channel.clone(),
            payload: serde_json::json!({}),
            due_at,
            expires_at: item.grace_ms.map(|g| Millis(due_at.0 + g)),
            follow_up_at: None,
        };
        let created = super::outbox::insert(conn, d, std::slice::from_ref(&row), false, now).await?;
        if !created.first().is_some_and(|e| e.created) {
            continue;
        }
        opened += 1;
        insert_item(conn, d, item, &row.id, now).await?;
        sqlx::query(Query::OpenDigest.sql(d))
            .bind(row.id.clone())
            .bind(now.0)
            .bind(item.bucket.clone())
            .run(&mut *conn, "digest: open")
            .await?;
    }
    Ok(opened)
}

async fn insert_item(
    conn: &mut AnyConnection,
    d: Dialect,
    item: &NewDigestItem,
    outbox_id: &str,
    now: Millis,
) -> Result<(), StoreError> {
    sqlx::query(Query::InsertDigestItem.sql(d))
        .bind(item.trigger_id.clone())
        .bind(item.rule_id.clone())
        .bind(outbox_id.to_owned())
        .bind(item.user_id.as_str().to_owned())
        .bind(crate::domain::storable_text(&item.payload.to_string()).into_owned())
        .bind(item.occurred_at.0)
        .bind(now.0)
        .run(&mut *conn, "digest: add item")
        .await?;
    Ok(())
}
