//! `engagement_rules`, and cancelling what a rule (or a user, or an operator)
//! no longer wants sent.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::events::NewEvent;
use super::queries::Query;
use super::rows::{Fetch, Run};
use super::rows::{opt_text, text};
use super::sends::NewSend;
use super::values::AnyQuery;
use super::{SqlStore, Store, StoreError};
use crate::clock::Millis;
use crate::domain::SendStatus;

/// A rule as stored. The template is JSON here; `crate::planning::rule` parses it.
#[derive(Debug, Clone, Serialize)]
pub struct RuleRow {
    pub id: String,
    pub name: String,
    pub trigger_type: String,
    pub condition: Option<String>,
    pub channel: String,
    pub template: serde_json::Value,
    pub delay_seconds: i64,
    pub grace_seconds: Option<i64>,
    pub category: String,
    pub enabled: bool,
    /// Where the `webhook` channel posts this rule's messages.
    pub webhook_url: Option<String>,
    /// Send window, digest, cap, escalation and the preference center's
    /// names, as the API received them (`crate::planning::workflow::WorkflowInput`);
    /// `None` for a rule with none of them.
    pub workflow: Option<serde_json::Value>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl RuleRow {
    fn from_any(row: &AnyRow) -> Result<RuleRow, StoreError> {
        let op = "decode engagement_rules row";
        let template = text(row, "template").map_err(StoreError::db(op))?;
        let template = serde_json::from_str(&template).map_err(|_| StoreError::CorruptRow {
            table: "engagement_rules",
            column: "template",
            value: template.chars().take(80).collect(),
        })?;
        let inner = || -> Result<RuleRow, sqlx::Error> {
            Ok(RuleRow {
                id: text(row, "id")?,
                name: text(row, "name")?,
                trigger_type: text(row, "trigger_type")?,
                condition: opt_text(row, "condition_expr")?,
                channel: text(row, "channel")?,
                template: serde_json::Value::Null,
                delay_seconds: row.try_get("delay_seconds")?,
                grace_seconds: row.try_get("grace_seconds")?,
                category: text(row, "category")?,
                enabled: row.try_get::<i64, _>("enabled")? != 0,
                webhook_url: opt_text(row, "webhook_url")?,
                workflow: None,
                created_at: Millis(row.try_get("created_at")?),
                updated_at: Millis(row.try_get("updated_at")?),
            })
        };
        let mut rule = inner().map_err(StoreError::db(op))?;
        rule.template = template;
        if let Some(w) = opt_text(row, "workflow").map_err(StoreError::db(op))? {
            rule.workflow = Some(serde_json::from_str(&w).map_err(|_| StoreError::CorruptRow {
                table: "engagement_rules",
                column: "workflow",
                value: w.chars().take(80).collect(),
            })?);
        }
        Ok(rule)
    }
}

/// Which scheduled rows to cancel.
#[derive(Debug, Clone, Copy)]
pub enum CancelScope<'a> {
    Rule(&'a str),
    User(&'a str),
    Row(&'a str),
    /// Up to [`super::fan_out::CANCEL_CHUNK`] of a trigger's rows: a
    /// trigger to a million is cancelled a chunk per transaction, the
    /// caller calling again until none is left.
    Trigger(&'a str),
}

#[async_trait]
pub trait RuleStore: Send + Sync {
    async fn insert_rule(&self, rule: &RuleRow) -> Result<(), StoreError>;
    async fn get_rule(&self, id: &str) -> Result<Option<RuleRow>, StoreError>;
    async fn list_rules(&self) -> Result<Vec<RuleRow>, StoreError>;
    /// Replaces every column but `id` and `created_at`; false if no such rule.
    async fn update_rule(&self, rule: &RuleRow) -> Result<bool, StoreError>;
    async fn delete_rule(&self, id: &str) -> Result<bool, StoreError>;
    /// Every enabled rule: what the planner's cache holds.
    async fn enabled_rules(&self) -> Result<Vec<RuleRow>, StoreError>;
    /// `(id, enabled, updated_at)` of each of these rules that exists: one
    /// query per batch tells the worker whether its cached copies are
    /// current and still enabled.
    async fn rule_versions(&self, ids: &[&str]) -> Result<Vec<(String, bool, Millis)>, StoreError>;
    /// These rules (those that exist), in one query.
    async fn rules_by_ids(&self, ids: &[&str]) -> Result<Vec<RuleRow>, StoreError>;
    /// Ends still-`scheduled` rows as `cancelled`, each with a send-log row
    /// carrying `detail`, in one transaction. Rows already claimed are left
    /// to finish. Returns how many were cancelled.
    async fn cancel_scheduled(&self, scope: CancelScope<'_>, detail: &str, now: Millis) -> Result<u64, StoreError>;
}

/// Binds a chunked cancel's limit (see [`CancelScope::Trigger`]).
fn bind_limit(chunked: bool, q: AnyQuery<'_>) -> AnyQuery<'_> {
    if chunked { q.bind(super::fan_out::CANCEL_CHUNK) } else { q }
}

fn rules(rows: &[AnyRow]) -> Result<Vec<RuleRow>, StoreError> {
    rows.iter().map(RuleRow::from_any).collect()
}

/// Binds a rule's editable fields, name to workflow, in the order both
/// `InsertRule` (after the id) and `UpdateRule` name them.
fn bind_fields<'q>(q: AnyQuery<'q>, r: &RuleRow) -> AnyQuery<'q> {
    q.bind(r.name.clone())
        .bind(r.trigger_type.clone())
        .bind(r.condition.clone())
        .bind(r.channel.clone())
        .bind(r.template.to_string())
        .bind(r.delay_seconds)
        .bind(r.grace_seconds)
        .bind(r.category.clone())
        .bind(i64::from(r.enabled))
        .bind(r.webhook_url.clone())
        .bind(r.workflow.as_ref().map(|w| w.to_string()))
}

#[async_trait]
impl RuleStore for SqlStore {
    async fn insert_rule(&self, r: &RuleRow) -> Result<(), StoreError> {
        bind_fields(sqlx::query(self.sql(Query::InsertRule)).bind(r.id.clone()), r)
            .bind(r.created_at.0)
            .bind(r.updated_at.0)
            .run(self.writer(), "insert rule")
            .await?;
        Ok(())
    }

    async fn get_rule(&self, id: &str) -> Result<Option<RuleRow>, StoreError> {
        let row = sqlx::query(self.sql(Query::GetRule)).bind(id.to_owned()).optional(self.pool(), "get rule").await?;
        row.as_ref().map(RuleRow::from_any).transpose()
    }

    async fn list_rules(&self) -> Result<Vec<RuleRow>, StoreError> {
        let rows = sqlx::query(self.sql(Query::ListRules)).all(self.pool(), "list rules").await?;
        rules(&rows)
    }

    async fn update_rule(&self, r: &RuleRow) -> Result<bool, StoreError> {
        let n = bind_fields(sqlx::query(self.sql(Query::UpdateRule)), r)
            .bind(r.updated_at.0)
            .bind(r.id.clone())
            .run(self.writer(), "update rule")
            .await?;
        Ok(n == 1)
    }

    async fn delete_rule(&self, id: &str) -> Result<bool, StoreError> {
        let n = sqlx::query(self.sql(Query::DeleteRule)).bind(id.to_owned()).run(self.writer(), "delete rule").await?;
        Ok(n == 1)
    }

    async fn enabled_rules(&self) -> Result<Vec<RuleRow>, StoreError> {
        let rows = sqlx::query(self.sql(Query::EnabledRules)).all(self.pool(), "enabled rules").await?;
        rules(&rows)
    }

    async fn rule_versions(&self, ids: &[&str]) -> Result<Vec<(String, bool, Millis)>, StoreError> {
        let rows = self.read_by_keys(Query::RuleVersions, ids, "rule versions").await?;
        rows.iter()
            .map(|r| Ok((text(r, "id")?, r.try_get::<i64, _>("enabled")? != 0, Millis(r.try_get("updated_at")?))))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("rule versions"))
    }

    async fn rules_by_ids(&self, ids: &[&str]) -> Result<Vec<RuleRow>, StoreError> {
        let rows = self.read_by_keys(Query::RulesByIds, ids, "rules by id").await?;
        rules(&rows)
    }

    async fn cancel_scheduled(&self, scope: CancelScope<'_>, detail: &str, now: Millis) -> Result<u64, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let (cancel, lock, value) = match scope {
            CancelScope::Rule(id) => (Query::CancelScheduledRule, Query::LockScheduledRule, id),
            CancelScope::User(id) => (Query::CancelScheduledUser, Query::LockScheduledUser, id),
            CancelScope::Row(id) => (Query::CancelScheduledRow, Query::LockScheduledRow, id),
            CancelScope::Trigger(id) => (Query::CancelScheduledTrigger, Query::LockScheduledTrigger, id),
        };
        let chunked = matches!(scope, CancelScope::Trigger(_));
        let mut tx = self.begin_write().await.map_err(db("cancel: begin"))?;
        // One compare-and-set for the whole scope: a row a worker claimed
        // meanwhile is no longer 'scheduled' and is the worker's to finish.
        let update =
            bind_limit(chunked, sqlx::query(cancel.sql(d)).bind(detail.to_owned()).bind(now.0).bind(value.to_owned()));
        let cancelled = if d.has_update_returning() {
            update.all(&mut *tx, "cancel: update").await?
        } else {
            // No RETURNING: lock the rows first, so the update changes
            // exactly the rows read.
            let rows = bind_limit(chunked, sqlx::query(lock.sql(d)).bind(value.to_owned()))
                .all(&mut *tx, "cancel: select")
                .await?;
            update.run(&mut *tx, "cancel: update").await?;
            rows
        };
        let mut sends = Vec::with_capacity(cancelled.len());
        let mut events = Vec::with_capacity(cancelled.len());
        for row in &cancelled {
            let send = NewSend {
                outbox_id: text(row, "id").map_err(db("cancel: read"))?,
                rule_id: opt_text(row, "rule_id").map_err(db("cancel: read"))?,
                trigger_id: opt_text(row, "trigger_id").map_err(db("cancel: read"))?,
                user_id: text(row, "user_id").map_err(db("cancel: read"))?,
                channel: text(row, "channel").map_err(db("cancel: read"))?,
                transport: None,
                address_hash: None,
                status: SendStatus::Cancelled.as_str(),
                detail: Some(detail.to_owned()),
                attempts: row.try_get::<i64, _>("attempts").map_err(db("cancel: read"))?,
                provider_id: None,
            };
            events.push(NewEvent {
                kind: "outcome",
                user_id: Some(send.user_id.clone()),
                outbox_id: Some(send.outbox_id.clone()),
                data: serde_json::json!({
                    "outbox_id": send.outbox_id, "user_id": send.user_id, "rule_id": send.rule_id,
                    "trigger_id": send.trigger_id, "channel": send.channel,
                    "status": SendStatus::Cancelled.as_str(), "detail": detail, "at": now.to_rfc3339(),
                }),
            });
            sends.push(send);
        }
        super::sends::insert(&mut tx, d, &sends, now).await?;
        super::events::append(&mut tx, d, &events, now).await?;
        tx.commit().await.map_err(db("cancel: commit"))?;
        if !events.is_empty() {
            self.signal_events().await;
        }
        Ok(cancelled.len() as u64)
    }
}
