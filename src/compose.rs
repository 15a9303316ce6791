//! Between claim and channel: decide whether rule-planned rows should still
//! go out, and render them, a whole batch at a time.
//!
//! Done at delivery time rather than at planning time on purpose: a rule
//! disabled after planning, a preference changed, a recipient's new address
//! or a corrected template all take effect for messages not yet sent.
//!
//! Done per batch rather than per row: whatever the batch size, composing it
//! costs at most four queries (the rules' versions, the rules that changed,
//! the recipients, the triggers' times), where reading the rule, the
//! recipient and the trigger for every row cost three per row. Compiled
//! templates are cached per rule and version: the versions query, run for
//! every batch, is what makes a rule disabled or edited after planning
//! cancel or re-render its unsent rows exactly as an uncached read would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::address::AddressKeys;
use crate::channel::{Delivery, Outcome};
use crate::clock::Millis;
use crate::planner::user_context;
use crate::recipient::Preferences;
use crate::store::{OutboxRow, RecipientRow, RuleRow, Store, StoreError};
use crate::template::{CompiledTemplateSet, TemplateSet};

/// What to do with one claimed row.
pub enum Prepared {
    Deliver(Box<Delivery>),
    /// Do not call the channel; record this.
    Skip {
        row: Box<OutboxRow>,
        outcome: Outcome,
    },
}

impl Prepared {
    pub fn row(&self) -> &OutboxRow {
        match self {
            Prepared::Deliver(d) => &d.row,
            Prepared::Skip { row, .. } => row,
        }
    }
}

/// A rule as the worker uses it: the row and its templates, compiled once
/// per version.
struct CachedRule {
    rule: Arc<RuleRow>,
    /// `Err` holds the detail to record: a template that cannot even be read
    /// fails every row of the rule, and says why.
    templates: Result<Arc<CompiledTemplateSet>, String>,
}

/// Composes batches of claimed rows. One per worker; cheap to share.
pub struct Composer {
    store: Arc<dyn Store>,
    /// To put the address hash on email outcomes decided here (an opted-out
    /// user), so "did this address get it" finds them too.
    keys: Option<AddressKeys>,
    rules: Mutex<HashMap<String, Arc<CachedRule>>>,
}

/// What one batch needs from the database, loaded once.
struct Loaded {
    /// Rule id -> the current rule, if it exists.
    rules: HashMap<String, Arc<CachedRule>>,
    /// Rule id -> enabled, for every rule that still exists.
    enabled: HashMap<String, bool>,
    recipients: HashMap<String, RecipientRow>,
    occurred: HashMap<String, Millis>,
}

impl Composer {
    pub fn new(store: Arc<dyn Store>, keys: Option<AddressKeys>) -> Composer {
        Composer { store, keys, rules: Mutex::new(HashMap::new()) }
    }

    /// Decides, for each row, whether to deliver it (rendered) or what to
    /// record instead. Rows keep their order.
    pub async fn prepare(&self, rows: Vec<OutboxRow>) -> Vec<Prepared> {
        if rows.iter().all(|r| r.rule_id.is_none()) {
            return rows.into_iter().map(|row| Prepared::Deliver(Box::new(Delivery::bare(row)))).collect();
        }
        let loaded =
            crate::store::race::retry_while_away("compose", crate::store::race::AWAY_WAIT, || self.load(&rows)).await;
        match loaded {
            Ok(loaded) => rows.into_iter().map(|row| self.prepare_row(row, &loaded)).collect(),
            // The database blinked: try these rows again later.
            Err(e) => rows
                .into_iter()
                .map(|row| match row.rule_id {
                    None => Prepared::Deliver(Box::new(Delivery::bare(row))),
                    Some(_) => Prepared::Skip {
                        row: Box::new(row),
                        outcome: Outcome::retry(format!("could not load the row's rule or recipient: {e}")),
                    },
                })
                .collect(),
        }
    }

    async fn load(&self, rows: &[OutboxRow]) -> Result<Loaded, StoreError> {
        let planned: Vec<&OutboxRow> = rows.iter().filter(|r| r.rule_id.is_some()).collect();
        let rule_ids: Vec<&str> = planned.iter().filter_map(|r| r.rule_id.as_deref()).collect();
        let versions = self.store.rule_versions(&rule_ids).await?;
        let mut rules = HashMap::with_capacity(versions.len());
        let mut stale = Vec::new();
        {
            let cache = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
            for (id, _, updated_at) in &versions {
                match cache.get(id) {
                    Some(c) if c.rule.updated_at == *updated_at => {
                        rules.insert(id.clone(), c.clone());
                    }
                    _ => stale.push(id.as_str()),
                }
            }
        }
        if !stale.is_empty() {
            let fresh = self.store.rules_by_ids(&stale).await?;
            let mut cache = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
            for rule in fresh {
                let templates = serde_json::from_value::<TemplateSet>(rule.template.clone())
                    .map(|set| Arc::new(set.compile_for_rendering()))
                    .map_err(|e| format!("rule {} has an unreadable template: {e}", rule.id));
                let cached = Arc::new(CachedRule { rule: Arc::new(rule), templates });
                cache.insert(cached.rule.id.clone(), cached.clone());
                rules.insert(cached.rule.id.clone(), cached);
            }
        }
        let enabled = versions.into_iter().map(|(id, enabled, _)| (id, enabled)).collect();
        let users: Vec<&str> = planned.iter().map(|r| r.user_id.as_str()).collect();
        let recipients =
            self.store.recipients_by_ids(&users).await?.into_iter().map(|r| (r.user_id.clone(), r)).collect();
        let trigger_ids: Vec<&str> = planned.iter().filter_map(|r| r.trigger_id.as_deref()).collect();
        let occurred = self.store.trigger_times(&trigger_ids).await?.into_iter().collect();
        Ok(Loaded { rules, enabled, recipients, occurred })
    }

    fn prepare_row(&self, row: OutboxRow, loaded: &Loaded) -> Prepared {
        let skip = |row: OutboxRow, outcome| Prepared::Skip { row: Box::new(row), outcome };
        let Some(rule_id) = row.rule_id.clone() else {
            return Prepared::Deliver(Box::new(Delivery::bare(row)));
        };
        let (Some(cached), Some(&enabled)) = (loaded.rules.get(&rule_id), loaded.enabled.get(&rule_id)) else {
            return skip(row, Outcome::Cancelled { detail: format!("rule {rule_id} was deleted") });
        };
        if !enabled {
            return skip(row, Outcome::Cancelled { detail: "rule disabled".into() });
        }
        let rule = &cached.rule;
        let recipient = loaded.recipients.get(&row.user_id);
        // Email outcomes carry the address hash whenever the user has an
        // address, decided here or by the channel.
        let address_hash = match (&self.keys, recipient.and_then(|r| r.email.as_deref())) {
            (Some(keys), Some(email)) if row.channel == "email" => keys.hash(email),
            _ => None,
        };
        if let Some(r) = recipient {
            let prefs: Preferences = serde_json::from_value(r.preferences.clone()).unwrap_or_default();
            if let Some(why) = prefs.opt_out(&rule.category, &row.channel) {
                return skip(row, Outcome::Suppressed { detail: why, address_hash });
            }
        }
        let templates = match &cached.templates {
            Ok(t) => t,
            Err(detail) => return skip(row, Outcome::Terminal { detail: detail.clone(), address_hash }),
        };
        let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
        let occurred_at = row.trigger_id.as_ref().and_then(|t| loaded.occurred.get(t)).map(|t| t.to_rfc3339());
        let ctx = serde_json::json!({
            "payload": payload,
            "trigger": { "id": row.trigger_id, "type": rule.trigger_type, "occurred_at": occurred_at },
            "user": user_context(&row.user_id, recipient),
        });
        let locale = recipient.and_then(|r| r.locale.as_deref());
        match templates.render(locale, &ctx) {
            Ok(message) => Prepared::Deliver(Box::new(Delivery {
                row,
                rule: Some(rule.clone()),
                recipient: recipient.cloned(),
                message: Some(message),
            })),
            // A template that fails now fails on every retry: terminal, with
            // the error an operator needs to fix it.
            Err(e) => skip(row, Outcome::Terminal { detail: format!("template failed to render: {e}"), address_hash }),
        }
    }
}
