//! Between claim and channel: decide whether a rule-planned row should still
//! go out, and render it.
//!
//! Done at delivery time rather than at planning time on purpose: a rule
//! disabled after planning, a preference changed, a recipient's new address
//! or a corrected template all take effect for messages not yet sent.

use crate::channel::{Delivery, Outcome};
use crate::domain::UserId;
use crate::planner::user_context;
use crate::recipient::Preferences;
use crate::store::{OutboxRow, Store, StoreError};
use crate::template::TemplateSet;

pub enum Prepared {
    Deliver(Box<Delivery>),
    /// Do not call the channel; record this.
    Skip(Outcome),
}

/// Loads what a row needs and checks it may still be sent.
pub async fn prepare(store: &dyn Store, row: &OutboxRow) -> Prepared {
    match load(store, row).await {
        Ok(p) => p,
        // The database blinked: try the whole row again later.
        Err(e) => Prepared::Skip(Outcome::retry(format!("could not load the row's rule or recipient: {e}"))),
    }
}

async fn load(store: &dyn Store, row: &OutboxRow) -> Result<Prepared, StoreError> {
    let Some(rule_id) = &row.rule_id else {
        return Ok(Prepared::Deliver(Box::new(Delivery::bare(row.clone()))));
    };
    let Some(rule) = store.get_rule(rule_id).await? else {
        return Ok(Prepared::Skip(Outcome::Cancelled { detail: format!("rule {rule_id} was deleted") }));
    };
    if !rule.enabled {
        return Ok(Prepared::Skip(Outcome::Cancelled { detail: "rule disabled".into() }));
    }
    let recipient = match UserId::parse("user_id", &row.user_id) {
        Ok(user) => store.get_recipient(&user).await?,
        Err(_) => None,
    };
    if let Some(r) = &recipient {
        let prefs: Preferences = serde_json::from_value(r.preferences.clone()).unwrap_or_default();
        if let Some(why) = prefs.opt_out(&rule.category, &row.channel) {
            return Ok(Prepared::Skip(Outcome::Suppressed { detail: why, address_hash: None }));
        }
    }
    let template: TemplateSet = match serde_json::from_value(rule.template.clone()) {
        Ok(t) => t,
        Err(e) => {
            return Ok(Prepared::Skip(Outcome::terminal(format!("rule {rule_id} has an unreadable template: {e}"))));
        }
    };
    let trigger = match &row.trigger_id {
        Some(id) => store.get_trigger(id).await?,
        None => None,
    };
    let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
    let ctx = serde_json::json!({
        "payload": payload,
        "trigger": {
            "id": row.trigger_id,
            "type": rule.trigger_type,
            "occurred_at": trigger.as_ref().map(|t| t.occurred_at.to_rfc3339()),
        },
        "user": user_context(&row.user_id, recipient.as_ref()),
    });
    let locale = recipient.as_ref().and_then(|r| r.locale.as_deref());
    match template.render(locale, &ctx) {
        Ok(message) => Ok(Prepared::Deliver(Box::new(Delivery {
            row: row.clone(),
            rule: Some(rule),
            recipient,
            message: Some(message),
        }))),
        // A template that fails now fails on every retry: terminal, with the
        // error an operator needs to fix it.
        Err(e) => Ok(Prepared::Skip(Outcome::terminal(format!("template failed to render: {e}")))),
    }
}
