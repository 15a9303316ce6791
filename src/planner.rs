//! The planner: turns triggers into outbox rows, one per enabled matching rule.
//!
//! Triggers arrive through the API (planned at once, in the request) or as
//! rows a host application inserted in its own transaction (picked up by
//! [`Planner::run`]'s sweep). Planning is idempotent twice over: a
//! compare-and-set on `planned_at` decides which instance plans a trigger,
//! and each row's dedupe key `trigger:rule:channel` means that even a replay
//! never doubles a message.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::domain::{ChannelName, UserId};
use crate::store::{Enqueued, NewOutboxRow, RecipientRow, RuleRow, Store, StoreError, TriggerRow, new_id};
use crate::template::Condition;

/// What one rule made of one trigger.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RuleDecision {
    pub rule_id: String,
    pub rule_name: String,
    pub planned: bool,
    /// Why not, when not planned; the due time when planned.
    pub reason: String,
}

/// The pure part of planning: which rules fire for a trigger, and the rows
/// they would plan. Used by the planner and by rule previews alike.
pub struct Plan {
    pub rows: Vec<NewOutboxRow>,
    pub decisions: Vec<RuleDecision>,
}

impl Plan {
    /// One line for `engagement_triggers.plan_detail`.
    pub fn detail(&self, trigger_type: &str) -> String {
        if self.decisions.is_empty() {
            return format!("no enabled rule matches trigger type \"{trigger_type}\"");
        }
        let parts: Vec<String> =
            self.decisions.iter().map(|d| format!("rule \"{}\": {}", d.rule_name, d.reason)).collect();
        format!("planned {} message(s); {}", self.rows.len(), parts.join("; "))
    }
}

/// The context conditions and templates see.
pub fn context(trigger: &TriggerRow, recipient: Option<&RecipientRow>) -> serde_json::Value {
    serde_json::json!({
        "payload": trigger.payload,
        "trigger": { "id": trigger.id, "type": trigger.trigger_type, "occurred_at": trigger.occurred_at.to_rfc3339() },
        "user": user_context(&trigger.user_id, recipient),
    })
}

pub fn user_context(user_id: &str, recipient: Option<&RecipientRow>) -> serde_json::Value {
    match recipient {
        Some(r) => serde_json::json!({
            "id": user_id, "email": r.email, "name": r.name, "locale": r.locale, "timezone": r.timezone,
        }),
        None => serde_json::json!({ "id": user_id, "email": null, "name": null, "locale": null, "timezone": null }),
    }
}

/// Evaluates `rules` (already filtered to enabled rules of the trigger's
/// type) against one trigger.
pub fn evaluate(trigger: &TriggerRow, rules: &[RuleRow], recipient: Option<&RecipientRow>) -> Plan {
    let ctx = context(trigger, recipient);
    let mut rows = Vec::new();
    let mut decisions = Vec::new();
    for rule in rules {
        let decide = |planned, reason: String| RuleDecision {
            rule_id: rule.id.clone(),
            rule_name: rule.name.clone(),
            planned,
            reason,
        };
        if let Some(source) = &rule.condition {
            match Condition::compile(source).and_then(|c| c.eval(&ctx)) {
                Ok(true) => {}
                Ok(false) => {
                    decisions.push(decide(false, format!("condition `{source}` is false")));
                    continue;
                }
                Err(e) => {
                    decisions.push(decide(false, format!("condition `{source}` could not be evaluated: {e}")));
                    continue;
                }
            }
        }
        let (Ok(user_id), Ok(channel)) =
            (UserId::parse("user_id", &trigger.user_id), ChannelName::parse("channel", &rule.channel))
        else {
            decisions
                .push(decide(false, format!("invalid user id {:?} or channel {:?}", trigger.user_id, rule.channel)));
            continue;
        };
        let due_at = trigger.occurred_at.plus(Duration::from_secs(rule.delay_seconds.max(0) as u64));
        let expires_at = rule.grace_seconds.map(|g| due_at.plus(Duration::from_secs(g.max(0) as u64)));
        decisions.push(decide(true, format!("{} due {due_at}", rule.channel)));
        rows.push(NewOutboxRow {
            id: new_id(),
            dedupe_key: format!("{}:{}:{}", trigger.id, rule.id, rule.channel),
            rule_id: Some(rule.id.clone()),
            trigger_id: Some(trigger.id.clone()),
            user_id,
            channel,
            payload: trigger.payload.clone(),
            due_at,
            expires_at,
        });
    }
    Plan { rows, decisions }
}

#[derive(Clone)]
pub struct Planner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    poll: Duration,
    batch: u32,
}

impl Planner {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, poll: Duration, batch: u32) -> Planner {
        Planner { store, clock, poll, batch }
    }

    /// Plans one trigger. `None` when another planner had already planned it.
    pub async fn plan(&self, trigger: &TriggerRow) -> Result<Option<(Vec<Enqueued>, Plan)>, StoreError> {
        let rules = self.store.enabled_rules_for_type(&trigger.trigger_type).await?;
        // The recipient only matters to conditions; skip the read otherwise.
        let recipient = if rules.iter().any(|r| r.condition.is_some()) {
            match UserId::parse("user_id", &trigger.user_id) {
                Ok(u) => self.store.get_recipient(&u).await?,
                Err(_) => None,
            }
        } else {
            None
        };
        let plan = evaluate(trigger, &rules, recipient.as_ref());
        let detail = plan.detail(&trigger.trigger_type);
        let planned = self.store.plan_trigger(&trigger.id, &plan.rows, &detail, self.clock.now()).await?;
        Ok(planned.map(|enqueued| (enqueued, plan)))
    }

    /// Plans up to a batch of unplanned triggers; returns how many it planned.
    pub async fn tick(&self) -> Result<usize, StoreError> {
        let pending = self.store.unplanned_triggers(self.batch).await?;
        let mut planned = 0;
        for trigger in &pending {
            // One bad trigger must not stop the sweep.
            match self.plan(trigger).await {
                Ok(Some(_)) => planned += 1,
                Ok(None) => {}
                Err(e) => tracing::error!(trigger = %trigger.id, error = %e, "could not plan trigger"),
            }
        }
        Ok(planned)
    }

    /// Sweeps for triggers a host application inserted itself.
    pub async fn run(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let pause = match self.tick().await {
                Ok(n) if n as u32 >= self.batch => Duration::ZERO,
                Ok(_) => self.poll,
                Err(e) => {
                    tracing::error!(error = %e, "planner sweep failed");
                    self.poll.max(Duration::from_secs(1))
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }
}
