//! Between claim and channel: decide whether rule-planned rows should still
//! go out, and render them, a whole batch at a time.
//!
//! Done at delivery time rather than at planning time on purpose: a rule
//! disabled after planning, a preference changed, a recipient's new address
//! or a corrected template all take effect for messages not yet sent.
//!
//! Send windows, quiet hours and frequency caps are decided here too: a
//! rule's window and a recipient's quiet hours need only what a batch has
//! loaded already (the rule, the recipient), so a rule without them costs
//! nothing; a cap costs one transaction per batch that has capped rows
//! (see `store::throttle`).
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

use chrono_tz::Tz;

use crate::address::AddressKeys;
use crate::clock::Millis;
use crate::delivery::channel::email::message::TRANSACTIONAL;
use crate::delivery::channel::{Delivery, Outcome};
use crate::domain::{HoldReason, OutboxStatus};
use crate::planning::planner::user_context;
use crate::planning::recipient::Preferences;
use crate::planning::template::{CompiledTemplateSet, TemplateSet};
use crate::planning::workflow::{Gate, GateDecision, RuleWorkflow, Span, ThrottleScope, parse_zone};
use crate::store::{DigestItemRow, OriginalState, SlotAnswer, SlotRequest, throttle_bucket};
use crate::store::{OutboxRow, RecipientRow, RuleRow, Store, StoreError};

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

    fn into_row(self) -> OutboxRow {
        match self {
            Prepared::Deliver(d) => d.row,
            Prepared::Skip { row, .. } => *row,
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
    /// The send window and cap, parsed; `Err` as for `templates`.
    workflow: Result<RuleWorkflow, String>,
    /// Each escalation step's templates, in order (none for a rule that
    /// does not escalate).
    follow_ups: Vec<Result<Arc<CompiledTemplateSet>, String>>,
}

/// Composes batches of claimed rows. One per worker; cheap to share.
pub struct Composer {
    store: Arc<dyn Store>,
    /// To put the address hash on email outcomes decided here (an opt-out,
    /// a frequency cap, a template that fails, a grace window that ended, a
    /// rule disabled), so "did this address get it" finds them too. `None`
    /// only where no email is sent (tests, `herald bench`): a service's
    /// worker is given them ([`crate::delivery::worker::WorkerParts::address_keys`]).
    keys: Option<AddressKeys>,
    /// The zone of recipients without one (`worker.default_timezone`).
    default_tz: Tz,
    rules: Mutex<HashMap<String, Arc<CachedRule>>>,
}

/// What one batch needs from the database, loaded once.
struct Loaded {
    /// Rule id -> the current rule, if it exists.
    rules: HashMap<String, Arc<CachedRule>>,
    /// Rule id -> enabled, for every rule that still exists.
    enabled: HashMap<String, bool>,
    recipients: HashMap<String, RecipientRow>,
    /// Trigger id -> when it happened, its topic and actor.
    triggers: HashMap<String, crate::store::TriggerFacts>,
    /// Outbox id -> the triggers in that digest message, for rows of
    /// rules with a digest (read only when the batch has some).
    digests: HashMap<String, Vec<DigestItemRow>>,
    /// Original outbox id -> its state, for escalation follow-ups.
    originals: HashMap<String, OriginalState>,
}

impl Composer {
    pub fn new(store: Arc<dyn Store>, keys: Option<AddressKeys>) -> Composer {
        Composer { store, keys, default_tz: Tz::UTC, rules: Mutex::new(HashMap::new()) }
    }

    /// Recipients without a time zone of their own are in `tz`.
    pub fn with_default_timezone(mut self, tz: Tz) -> Composer {
        self.default_tz = tz;
        self
    }

    /// Decides, for each row, whether to deliver it (rendered) or what to
    /// record instead. Rows keep their order.
    pub async fn prepare(&self, rows: Vec<OutboxRow>, now: Millis) -> Vec<Prepared> {
        if rows.iter().all(|r| r.rule_id.is_none()) {
            return rows.into_iter().map(|row| Prepared::Deliver(Box::new(Delivery::bare(row)))).collect();
        }
        let loaded =
            crate::store::race::retry_while_away("compose", crate::store::race::AWAY_WAIT, || self.load(&rows)).await;
        match loaded {
            Ok(loaded) => {
                let prepared = rows.into_iter().map(|row| self.prepare_row(row, &loaded, now)).collect();
                self.apply_caps(prepared, &loaded, now).await
            }
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
                let workflow = RuleWorkflow::from_stored(rule.workflow.as_ref())
                    .map_err(|e| format!("rule {} has an unreadable workflow: {e}", rule.id));
                let steps = workflow.as_ref().ok().and_then(|w| w.escalate.as_ref()).map(|e| e.steps.as_slice());
                let follow_ups = steps
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                    .map(|(i, step)| {
                        step.template.compile().map(Arc::new).map_err(|errors| {
                            format!(
                                "rule {} has an escalation template (step {}) that does not compile: {errors:?}",
                                rule.id,
                                i + 1
                            )
                        })
                    })
                    .collect();
                let cached = Arc::new(CachedRule { rule: Arc::new(rule), templates, workflow, follow_ups });
                cache.insert(cached.rule.id.clone(), cached.clone());
                rules.insert(cached.rule.id.clone(), cached);
            }
        }
        let enabled = versions.into_iter().map(|(id, enabled, _)| (id, enabled)).collect();
        let trigger_ids: Vec<&str> = planned.iter().filter_map(|r| r.trigger_id.as_deref()).collect();
        let triggers: HashMap<String, crate::store::TriggerFacts> =
            self.store.trigger_times(&trigger_ids).await?.into_iter().collect();
        // The recipients, and the actors their templates may name.
        let mut users: Vec<&str> = planned.iter().map(|r| r.user_id.as_str()).collect();
        users.extend(triggers.values().filter_map(|t| t.actor_id.as_deref()));
        users.sort_unstable();
        users.dedup();
        let recipients =
            self.store.recipients_by_ids(&users).await?.into_iter().map(|r| (r.user_id.clone(), r)).collect();
        let digest_rows: Vec<&str> = planned
            .iter()
            .filter(|r| {
                let cached = r.rule_id.as_ref().and_then(|id| rules.get(id));
                cached.is_some_and(|c: &Arc<CachedRule>| c.workflow.as_ref().is_ok_and(|w| w.digest.is_some()))
            })
            .map(|r| r.id.as_str())
            .collect();
        let mut digests: HashMap<String, Vec<DigestItemRow>> = HashMap::new();
        for item in self.store.digest_items(&digest_rows).await? {
            digests.entry(item.outbox_id.clone()).or_default().push(item);
        }
        let originals_wanted: Vec<&str> =
            planned.iter().filter_map(|r| crate::planning::workflow::follow_up_of(&r.dedupe_key)).collect();
        let originals = self
            .store
            .original_states(&originals_wanted)
            .await?
            .into_iter()
            .map(|o| (o.outbox_id.clone(), o))
            .collect();
        Ok(Loaded { rules, enabled, recipients, triggers, digests, originals })
    }

    /// Takes a frequency-cap slot for each row about to be delivered whose
    /// rule has a cap, in one transaction; a row that gets none ends
    /// `suppressed`, naming the cap.
    async fn apply_caps(&self, prepared: Vec<Prepared>, loaded: &Loaded, now: Millis) -> Vec<Prepared> {
        let mut requests = Vec::new();
        let mut capped_rows = Vec::new();
        for (i, p) in prepared.iter().enumerate() {
            let Prepared::Deliver(d) = p else { continue };
            let Some(cached) = d.row.rule_id.as_ref().and_then(|id| loaded.rules.get(id)) else { continue };
            let Ok(RuleWorkflow { throttle: Some(cap), .. }) = &cached.workflow else { continue };
            let rule = &cached.rule;
            let (scope, id, what) = match cap.scope {
                ThrottleScope::Rule => ("rule", &rule.id, format!("rule \"{}\" ({})", rule.name, rule.id)),
                ThrottleScope::Category => ("category", &rule.category, format!("category \"{}\"", rule.category)),
            };
            requests.push(SlotRequest {
                bucket: throttle_bucket(scope, id, &d.row.user_id),
                limit: cap.limit,
                per_ms: cap.per_seconds.saturating_mul(1000),
                outbox_id: d.row.id.clone(),
            });
            capped_rows.push((i, format!("{} for {what}", cap.describe())));
        }
        if requests.is_empty() {
            return prepared;
        }
        let mut overrides: HashMap<usize, Outcome> = HashMap::new();
        match self.store.take_throttle_slots(&requests, now).await {
            Ok(answers) => {
                for ((i, cap), answer) in capped_rows.into_iter().zip(answers) {
                    if let SlotAnswer::Capped { reached_at, next_free } = answer {
                        let row = prepared[i].row();
                        let address_hash = self.address_hash(row, loaded.recipients.get(&row.user_id));
                        let detail = format!(
                            "frequency cap: {cap}, reached at {reached_at}; the next message may go from {next_free}"
                        );
                        overrides.insert(i, Outcome::Suppressed { detail, address_hash });
                    }
                }
            }
            Err(e) => {
                for (i, _) in capped_rows {
                    overrides.insert(i, Outcome::retry(format!("could not check the frequency cap: {e}")));
                }
            }
        }
        prepared
            .into_iter()
            .enumerate()
            .map(|(i, p)| match overrides.remove(&i) {
                Some(outcome) => Prepared::Skip { row: Box::new(p.into_row()), outcome },
                None => p,
            })
            .collect()
    }

    /// The hash an email outcome carries, when the user has an address.
    fn address_hash(&self, row: &OutboxRow, recipient: Option<&RecipientRow>) -> Option<String> {
        match (&self.keys, recipient.and_then(|r| r.email.as_deref())) {
            (Some(keys), Some(email)) if row.channel == "email" => keys.hash(email),
            _ => None,
        }
    }

    fn prepare_row(&self, row: OutboxRow, loaded: &Loaded, now: Millis) -> Prepared {
        let skip = |row: OutboxRow, outcome| Prepared::Skip { row: Box::new(row), outcome };
        let Some(rule_id) = row.rule_id.clone() else {
            return Prepared::Deliver(Box::new(Delivery::bare(row)));
        };
        let recipient = loaded.recipients.get(&row.user_id);
        // Email outcomes carry the address hash whenever the user has an
        // address, decided here or by the channel: "did this address get
        // it" must find a message that was never handed to the relay too.
        let address_hash = self.address_hash(&row, recipient);
        let (Some(cached), Some(&enabled)) = (loaded.rules.get(&rule_id), loaded.enabled.get(&rule_id)) else {
            return skip(row, Outcome::Cancelled { detail: format!("rule {rule_id} was deleted"), address_hash });
        };
        if !enabled {
            return skip(row, Outcome::Cancelled { detail: "rule disabled".into(), address_hash });
        }
        let rule = &cached.rule;
        if let Some(r) = recipient {
            // The user's own choice first: a host's preferences never
            // override what the user chose in the preference center.
            if let Some(why) = crate::planning::recipient::user_opt_out(&r.user_choices, &rule.category, &row.channel) {
                return skip(row, Outcome::Suppressed { detail: why, address_hash });
            }
            let topic = row.trigger_id.as_ref().and_then(|t| loaded.triggers.get(t)?.topic_key.as_deref());
            if let Some(why) = topic.and_then(|t| crate::planning::recipient::topic_muted(&r.user_choices, t)) {
                return skip(row, Outcome::Suppressed { detail: why, address_hash });
            }
            let prefs: Preferences = serde_json::from_value(r.preferences.clone()).unwrap_or_default();
            if !crate::planning::recipient::user_opt_in(&r.user_choices, &rule.category, &row.channel)
                && let Some(why) = prefs.opt_out(&rule.category, &row.channel)
            {
                return skip(row, Outcome::Suppressed { detail: why, address_hash });
            }
        }
        let workflow = match &cached.workflow {
            Ok(w) => w,
            Err(detail) => return skip(row, Outcome::Terminal { detail: detail.clone(), address_hash }),
        };
        // An escalation follow-up goes only if its inbox message was
        // delivered its step's `after` ago and is still unseen (unread).
        // A step the rule no longer has (edited since the chain was
        // planned) is cancelled: rendered with the rule's own template it
        // would send the inbox text on another channel.
        let follow_up = match crate::planning::workflow::follow_up_step(&row.dedupe_key) {
            None => None,
            Some((original, n)) => {
                match workflow
                    .escalate
                    .as_ref()
                    .and_then(|e| Some((e, e.step(n)?)))
                    .filter(|(_, s)| s.channel == row.channel)
                {
                    Some((esc, step)) => Some((esc, step, n, original.to_owned())),
                    None => {
                        let detail = format!(
                            "rule {rule_id} no longer has an escalation step {n} on {}: no follow-up of inbox \
                             message {original}",
                            row.channel
                        );
                        return skip(row, Outcome::Cancelled { detail, address_hash });
                    }
                }
            }
        };
        if let Some((esc, step, _, original)) = &follow_up {
            let decision = follow_up_decision(
                step.after_seconds,
                esc.unless_read,
                original,
                loaded.originals.get(original),
                &row.channel,
                now,
            );
            match decision {
                FollowUp::Go => {}
                FollowUp::Wait(until, detail) => {
                    let reason = HoldReason::Escalation;
                    return skip(row, Outcome::Held { until, expires_at: None, reason, detail });
                }
                FollowUp::Cancel(detail) => return skip(row, Outcome::Cancelled { detail, address_hash }),
            }
        }
        // Quiet hours hold every message but transactional ones.
        let quiet = match recipient.and_then(|r| r.quiet_hours.as_ref()) {
            Some(q) if rule.category != TRANSACTIONAL => Span::parse("quiet_hours", q).ok(),
            _ => None,
        };
        if workflow.send_window.is_some() || quiet.is_some() {
            let tz = recipient.and_then(|r| r.timezone.as_deref()).and_then(parse_zone).unwrap_or(self.default_tz);
            let gate = Gate { window: workflow.send_window, quiet, tz };
            match gate.decide(row.due_at, row.expires_at, now) {
                GateDecision::Go => {}
                GateDecision::Hold { until, expires_at, reason, detail } => {
                    return skip(row, Outcome::Held { until, expires_at, reason, detail });
                }
                GateDecision::Expired { detail } => return skip(row, Outcome::Expired { detail, address_hash }),
            }
        } else if let Some(spec) = crate::delivery::worker::policy::expired(&row, now) {
            return skip(row, Outcome::Expired { detail: spec.detail.unwrap_or_default(), address_hash });
        }
        let step_templates = follow_up.as_ref().map(|(_, _, n, _)| cached.follow_ups.get(n - 1));
        let templates = match (step_templates, &cached.templates) {
            (Some(Some(Ok(t))), _) => t,
            (Some(Some(Err(detail))), _) => {
                return skip(row, Outcome::Terminal { detail: detail.clone(), address_hash });
            }
            (Some(None), _) => {
                let detail = "the escalation step's template was not compiled".to_owned();
                return skip(row, Outcome::Terminal { detail, address_hash });
            }
            (None, Ok(t)) => t,
            (None, Err(detail)) => return skip(row, Outcome::Terminal { detail: detail.clone(), address_hash }),
        };
        let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
        let trigger = row.trigger_id.as_ref().and_then(|t| loaded.triggers.get(t));
        let occurred_at = trigger.map(|t| t.occurred_at.to_rfc3339());
        let actor = trigger.and_then(|t| t.actor_id.as_deref()).map(|a| user_context(a, loaded.recipients.get(a)));
        let topic = trigger.and_then(|t| t.topic_key.as_deref());
        let mut ctx = serde_json::json!({
            "payload": payload,
            "trigger": { "id": row.trigger_id, "type": rule.trigger_type, "occurred_at": occurred_at, "topic": topic },
            "user": user_context(&row.user_id, recipient),
            "actor": actor,
        });
        if workflow.digest.is_some() {
            let items = loaded.digests.get(&row.id).map(Vec::as_slice).unwrap_or_default();
            ctx["digest"] = crate::planning::digest::context(items);
        }
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

/// What an escalation follow-up should do now.
enum FollowUp {
    Go,
    Wait(Millis, String),
    Cancel(String),
}

/// The same for every step of a chain: `after_seconds` is the step's own,
/// counted from the inbox delivery, and `unless_read` the chain's.
fn follow_up_decision(
    after_seconds: i64,
    unless_read: bool,
    original_id: &str,
    original: Option<&OriginalState>,
    channel: &str,
    now: Millis,
) -> FollowUp {
    let after = std::time::Duration::from_secs(after_seconds.max(0) as u64);
    let Some(original) = original else {
        return FollowUp::Cancel(format!("the inbox message {original_id} no longer exists: no {channel} needed"));
    };
    match (original.status, original.delivered_at) {
        (OutboxStatus::Scheduled | OutboxStatus::Sending, _) => FollowUp::Wait(
            now.plus(after),
            format!(
                "waiting for {} {original_id} to be delivered, then {}s more",
                HoldReason::Escalation.words(),
                after_seconds
            ),
        ),
        (OutboxStatus::Sent, Some(delivered)) => {
            let (what, at) =
                if unless_read { ("read", original.read_at) } else { ("seen", original.seen_at.or(original.read_at)) };
            if let Some(at) = at.filter(|at| *at <= now) {
                return FollowUp::Cancel(format!(
                    "{what} in the inbox at {at}: no {channel} needed (follow-up of inbox message {original_id})"
                ));
            }
            let deadline = delivered.plus(after);
            if now < deadline {
                FollowUp::Wait(
                    deadline,
                    format!(
                        "waiting until {deadline} for {} {original_id} to be {what}",
                        HoldReason::Escalation.words()
                    ),
                )
            } else {
                FollowUp::Go
            }
        }
        (OutboxStatus::Sent, None) => {
            FollowUp::Cancel(format!("the inbox message {original_id} was deleted: no {channel} needed"))
        }
        (status, _) => FollowUp::Cancel(format!(
            "the inbox message {original_id} was not delivered ({status}): no {channel} follow-up"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An escalation's wait is stored as words only (the row's
    /// `last_error`); read back, both of its forms say it is a hold.
    #[test]
    fn an_escalation_wait_reads_back_as_a_hold() {
        let state = |status, delivered_at| OriginalState {
            outbox_id: "o1".into(),
            status,
            delivered_at,
            seen_at: None,
            read_at: None,
        };
        let now = Millis(1_000);
        for original in [state(OutboxStatus::Scheduled, None), state(OutboxStatus::Sent, Some(Millis(500)))] {
            let FollowUp::Wait(_, detail) = follow_up_decision(3_600, true, "o1", Some(&original), "email", now) else {
                panic!("{original:?} should wait");
            };
            assert_eq!(HoldReason::of_stored(&detail), Some(HoldReason::Escalation), "{detail}");
        }
    }
}
