//! The planner: turns triggers into outbox rows, one per enabled matching rule.
//!
//! Triggers arrive through the API (planned as they are recorded, see
//! [`crate::planning::intake`]) or as rows a host application inserted in its own
//! transaction (picked up by [`Planner::run`]'s sweep, a batch at a time).
//! Planning is idempotent twice over: a compare-and-set on `planned_at`
//! decides which instance plans a host's trigger, and each row's dedupe key
//! `trigger:rule:channel` means that even a replay never doubles a message.
//!
//! The enabled rules are read from a [`RuleBook`], a copy refreshed at most
//! [`RULES_STALENESS`] old, with each condition compiled once, instead of
//! reading and compiling them for every trigger.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use chrono_tz::Tz;

use crate::clock::{Clock, Millis};
use crate::domain::{ChannelName, UserId};
use crate::planning::template::{Condition, TemplateError};
use crate::planning::workflow::{Digest, RuleWorkflow, parse_zone};
use crate::store::{
    NewDigestItem, NewOutboxRow, RecipientRow, RuleRow, RuleStore, Store, StoreError, TriggerPlan, TriggerRow, new_id,
};

/// How old the planner's copy of the enabled rules may be. A rule enabled,
/// edited or disabled through this instance takes effect here at once; on
/// the other instances within this time. (A row planned by a rule disabled
/// meanwhile is cancelled at delivery, which checks the rule again.)
pub const RULES_STALENESS: Duration = Duration::from_secs(1);

/// How far ahead of Herald's clock a trigger's `occurred_at` may be.
/// `occurred_at` says when something happened, so it cannot be in the
/// future; this much is the host's clock running ahead of the database's.
/// `POST /v1/triggers` refuses a later one with a `422` naming the field; a
/// row a host wrote into `engagement_triggers` itself cannot be refused,
/// so the planner plans it as if it happened when it is planned, and its
/// plan detail says so. Read as a schedule instead ("send on that date"),
/// a typo in a date would hold a message for months without a word, and
/// `delay` already says "later".
pub const OCCURRED_AT_SKEW: Duration = Duration::from_secs(5 * 60);

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
    /// Triggers going into digests instead of messages of their own.
    pub digests: Vec<NewDigestItem>,
    pub decisions: Vec<RuleDecision>,
    /// What the planner changed about the trigger before planning it (an
    /// `occurred_at` too far ahead), in words.
    pub note: Option<String>,
}

impl Plan {
    /// One line for `engagement_triggers.plan_detail`.
    pub fn detail(&self, trigger_type: &str) -> String {
        let note = self.note.as_ref().map(|n| format!("{n}; ")).unwrap_or_default();
        if self.decisions.is_empty() {
            return format!("{note}no enabled rule matches trigger type \"{trigger_type}\"");
        }
        let parts: Vec<String> =
            self.decisions.iter().map(|d| format!("rule \"{}\": {}", d.rule_name, d.reason)).collect();
        match self.digests.len() {
            0 => format!("{note}planned {} message(s); {}", self.rows.len(), parts.join("; ")),
            n => format!(
                "{note}planned {} message(s) of its own and went into {n} digest(s); {}",
                self.rows.len(),
                parts.join("; ")
            ),
        }
    }
}

/// The trigger as the planner plans it at `now`: one whose `occurred_at`
/// is more than [`OCCURRED_AT_SKEW`] ahead is planned as if it occurred at
/// `now`, with the note that says so.
pub fn as_of(trigger: &TriggerRow, now: Millis) -> (std::borrow::Cow<'_, TriggerRow>, Option<String>) {
    if trigger.occurred_at <= now.plus(OCCURRED_AT_SKEW) {
        return (std::borrow::Cow::Borrowed(trigger), None);
    }
    let ahead = Duration::from_secs(trigger.occurred_at.since(now).as_secs());
    let note = format!(
        "occurred_at {} is {} ahead of Herald's clock ({now}), more than the {} allowed: planned as if it \
         occurred at {now}",
        trigger.occurred_at,
        humantime::format_duration(ahead),
        humantime::format_duration(OCCURRED_AT_SKEW),
    );
    let mut planned = trigger.clone();
    planned.occurred_at = now;
    (std::borrow::Cow::Owned(planned), Some(note))
}

/// The context conditions and templates see.
pub fn context(trigger: &TriggerRow, recipient: Option<&RecipientRow>) -> serde_json::Value {
    serde_json::json!({
        "payload": trigger.payload,
        "trigger": {
            "id": trigger.id, "type": trigger.trigger_type, "occurred_at": trigger.occurred_at.to_rfc3339(),
            "topic": trigger.topic_key,
        },
        "user": user_context(&trigger.user_id, recipient),
        "actor": trigger.actor_id.as_deref().map(|a| user_context(a, None)),
    })
}

/// When a trigger's messages may go at the earliest, before each rule's
/// delay: when it occurred, or its `send_at` if that is later.
pub fn due_base(trigger: &TriggerRow) -> Millis {
    trigger.send_at.map_or(trigger.occurred_at, |at| at.max(trigger.occurred_at))
}

pub fn user_context(user_id: &str, recipient: Option<&RecipientRow>) -> serde_json::Value {
    match recipient {
        Some(r) => serde_json::json!({
            "id": user_id, "email": r.email, "name": r.name, "locale": r.locale, "timezone": r.timezone,
        }),
        None => serde_json::json!({ "id": user_id, "email": null, "name": null, "locale": null, "timezone": null }),
    }
}

/// An enabled rule as the planner holds it: the row and its condition,
/// compiled once.
pub struct PlanRule {
    pub row: RuleRow,
    condition: Option<Result<Condition, TemplateError>>,
    /// The rule's digest and its key expression, compiled once.
    digest: Option<(Digest, Option<Result<Condition, TemplateError>>)>,
    /// For an inbox rule that escalates: each follow-up's channel and
    /// delay, in order, and what cancels them, in words.
    escalate: Option<(Vec<(String, i64)>, &'static str)>,
}

impl PlanRule {
    /// The channels of an escalating rule's follow-ups, in order.
    pub fn follow_up_channels(&self) -> impl Iterator<Item = &str> {
        self.escalate.iter().flat_map(|(steps, _)| steps.iter().map(|(c, _)| c.as_str()))
    }

    /// Whether the rule plans the same row for every recipient of a
    /// trigger (no condition, no digest): a fan-out plans such rules for a
    /// whole chunk in one statement (`planning::fan_out`).
    pub fn is_uniform(&self) -> bool {
        self.condition.is_none() && self.digest.is_none()
    }

    pub fn new(row: RuleRow) -> PlanRule {
        let condition = row.condition.as_deref().map(Condition::compile);
        let workflow = RuleWorkflow::from_stored(row.workflow.as_ref()).unwrap_or_default();
        let digest = workflow.digest.map(|d| {
            let key = d.key.as_deref().map(Condition::compile);
            (d, key)
        });
        let escalate = workflow.escalate.map(|e| {
            let by = e.cancelled_by();
            (e.steps.into_iter().map(|s| (s.channel, s.after_seconds)).collect(), by)
        });
        PlanRule { row, condition, digest, escalate }
    }
}

/// Evaluates `rules` (already filtered to enabled rules of the trigger's
/// type) against one trigger. For previews, which hold plain rows.
/// `default_tz` is the zone of a recipient without one.
pub fn evaluate(trigger: &TriggerRow, rules: &[RuleRow], recipient: Option<&RecipientRow>, default_tz: Tz) -> Plan {
    let rules: Vec<PlanRule> = rules.iter().cloned().map(PlanRule::new).collect();
    evaluate_rules(trigger, rules.iter(), recipient, default_tz)
}

/// [`evaluate`] with compiled rules.
pub fn evaluate_rules<'a>(
    trigger: &TriggerRow,
    rules: impl IntoIterator<Item = &'a PlanRule>,
    recipient: Option<&RecipientRow>,
    default_tz: Tz,
) -> Plan {
    let mut ctx = None;
    let mut rows = Vec::new();
    let mut decisions = Vec::new();
    let mut digests = Vec::new();
    if trigger.actor_id.as_deref() == Some(trigger.user_id.as_str()) {
        let decisions = rules
            .into_iter()
            .map(|r| RuleDecision {
                rule_id: r.row.id.clone(),
                rule_name: r.row.name.clone(),
                planned: false,
                reason: "the user is the trigger's actor, who is left out of its audience".into(),
            })
            .collect();
        return Plan { rows, digests, decisions, note: None };
    }
    let base = due_base(trigger);
    let held_ms = base.0.saturating_sub(trigger.occurred_at.0);
    for PlanRule { row: rule, condition, digest, escalate } in rules {
        let decide = |planned, reason: String| RuleDecision {
            rule_id: rule.id.clone(),
            rule_name: rule.name.clone(),
            planned,
            reason,
        };
        if let (Some(condition), Some(source)) = (condition, &rule.condition) {
            let ctx = ctx.get_or_insert_with(|| context(trigger, recipient));
            match condition.as_ref().map_err(Clone::clone).and_then(|c| c.eval(ctx)) {
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
        if let Some((spec, key)) = digest {
            let key_value = match key {
                None => String::new(),
                Some(key) => {
                    let ctx = ctx.get_or_insert_with(|| context(trigger, recipient));
                    match key.as_ref().map_err(Clone::clone).and_then(|k| k.eval_value(ctx)) {
                        Ok(v) => v,
                        Err(e) => {
                            let source = spec.key.as_deref().unwrap_or_default();
                            decisions.push(decide(false, format!("digest key `{source}` could not be evaluated: {e}")));
                            continue;
                        }
                    }
                }
            };
            // A schedule is read in the recipient's zone, as a send window is.
            let tz = recipient.and_then(|r| r.timezone.as_deref()).and_then(parse_zone).unwrap_or(default_tz);
            let close = spec.close(tz);
            decisions.push(decide(
                true,
                format!("goes into its {} digest ({close}, at most {} items)", rule.channel, spec.max_items),
            ));
            digests.push(NewDigestItem {
                bucket: crate::store::throttle_bucket("digest", &rule.id, &format!("{}\0{key_value}", trigger.user_id)),
                rule_id: rule.id.clone(),
                trigger_id: trigger.id.clone(),
                user_id,
                channel,
                payload: trigger.payload.clone(),
                occurred_at: trigger.occurred_at,
                close,
                max_items: spec.max_items,
                delay_ms: rule.delay_seconds.max(0).saturating_mul(1000).saturating_add(held_ms),
                grace_ms: rule.grace_seconds.map(|g| g.max(0).saturating_mul(1000)),
                to_many: false,
            });
            continue;
        }
        let due_at = base.plus(Duration::from_secs(rule.delay_seconds.max(0) as u64));
        let expires_at = rule.grace_seconds.map(|g| due_at.plus(Duration::from_secs(g.max(0) as u64)));
        let id = new_id();
        // An escalating inbox rule's message carries when its follow-up
        // falls due; the worker plans the follow-up row then
        // (`delivery::worker::follow_ups`), holds it until `after` past the
        // inbox delivery, and cancels it if the message was read (or, for
        // `unless: seen`, seen or read) by then. Planned with the message
        // instead, every trigger cost a second outbox row at intake, for a
        // follow-up that is most often cancelled. A chain's message carries
        // its first step's time; the worker plans every step then.
        let follow_ups: Vec<(&str, Millis)> = escalate
            .iter()
            .flat_map(|(steps, _)| steps.iter())
            .map(|(ch, after)| (ch.as_str(), due_at.plus(Duration::from_secs((*after).max(0) as u64))))
            .collect();
        let follow_up_at = follow_ups.first().map(|(_, at)| *at);
        match escalate {
            Some((_, by)) if !follow_ups.is_empty() => {
                let steps: Vec<String> =
                    follow_ups.iter().map(|(channel, at)| format!("then {channel} at the earliest {at}")).collect();
                decisions.push(decide(true, format!("{} due {due_at}, {} unless {by}", rule.channel, steps.join(", "))))
            }
            _ => decisions.push(decide(true, format!("{} due {due_at}", rule.channel))),
        }
        rows.push(NewOutboxRow {
            id,
            dedupe_key: format!("{}:{}:{}", trigger.id, rule.id, rule.channel),
            rule_id: Some(rule.id.clone()),
            trigger_id: Some(trigger.id.clone()),
            user_id,
            channel,
            payload: trigger.payload.clone(),
            due_at,
            expires_at,
            follow_up_at,
        });
    }
    Plan { rows, digests, decisions, note: None }
}

/// The enabled rules, by trigger type, as of at most [`RULES_STALENESS`]
/// ago. Shared by the API's intake and the planner's sweep.
///
/// A read that began before an [`invalidate`](RuleBook::invalidate) may
/// have read the rules as they were before the change; it answers its own
/// caller (whose trigger raced the change) but is not kept, or every
/// trigger for up to [`RULES_STALENESS`] after a rule was disabled through
/// this instance would still be planned by it. A generation counter, bumped
/// by each invalidation and compared before a read is stored, tells the
/// two apart. Rejected: holding the lock across the read (every trigger
/// would wait on one database round trip), and a plain "invalidated" flag
/// (a second read in flight could clear it for the first).
pub struct RuleBook {
    store: Arc<dyn Store>,
    /// Where the enabled rules are read: the store, or a test's stand-in
    /// that holds a read open (see [`RuleBook::reading_from`]).
    rules: Arc<dyn RuleStore>,
    copy: Mutex<KeptCopy>,
    default_tz: Tz,
}

/// The kept copy, and how many invalidations there have been.
#[derive(Default)]
struct KeptCopy {
    generation: u64,
    book: Option<(Instant, Arc<Book>)>,
}

/// One copy of the enabled rules.
#[derive(Default)]
pub struct Book {
    by_type: HashMap<String, Vec<PlanRule>>,
    /// The zone of recipients without one (`worker.default_timezone`).
    default_tz: Tz,
}

impl Book {
    /// Every enabled rule.
    pub fn all(&self) -> impl Iterator<Item = &PlanRule> {
        self.by_type.values().flatten()
    }

    /// The zone of recipients without one.
    pub fn zone(&self) -> Tz {
        self.default_tz
    }

    pub fn rules_for(&self, trigger_type: &str) -> &[PlanRule] {
        self.by_type.get(trigger_type).map_or(&[], Vec::as_slice)
    }

    /// Whether a trigger of this type needs its recipient read: a
    /// condition or a digest key can look at the user, and a digest
    /// schedule is read in their zone.
    pub fn needs_recipient(&self, trigger_type: &str) -> bool {
        self.rules_for(trigger_type)
            .iter()
            .any(|r| r.condition.is_some() || r.digest.as_ref().is_some_and(|(d, key)| key.is_some() || d.needs_zone()))
    }

    /// Plans each trigger; `recipients` holds the users whose triggers have
    /// a rule that needs them ([`Book::needs_recipient`]).
    pub fn plan(&self, trigger: &TriggerRow, recipients: &HashMap<String, RecipientRow>) -> Plan {
        evaluate_rules(
            trigger,
            self.rules_for(&trigger.trigger_type),
            recipients.get(&trigger.user_id),
            self.default_tz,
        )
    }

    /// [`Book::plan`] at `now`, for a trigger a host wrote itself: one
    /// dated too far ahead is planned as of `now` (see [`as_of`]).
    pub fn plan_as_of(&self, trigger: &TriggerRow, recipients: &HashMap<String, RecipientRow>, now: Millis) -> Plan {
        let (trigger, note) = as_of(trigger, now);
        let mut plan = self.plan(&trigger, recipients);
        plan.note = note;
        plan
    }
}

impl RuleBook {
    pub fn new(store: Arc<dyn Store>) -> RuleBook {
        let rules: Arc<dyn RuleStore> = store.clone();
        RuleBook::reading_from(store, rules)
    }

    /// The zone digest schedules are read in for recipients without one
    /// (`worker.default_timezone`, as for send windows); UTC otherwise.
    pub fn with_default_timezone(mut self, tz: Tz) -> RuleBook {
        self.default_tz = tz;
        self
    }

    /// A book that reads the enabled rules from `rules` rather than from
    /// `store`: for tests that hold a read open while a rule changes.
    pub fn reading_from(store: Arc<dyn Store>, rules: Arc<dyn RuleStore>) -> RuleBook {
        RuleBook { store, rules, copy: Mutex::new(KeptCopy::default()), default_tz: Tz::UTC }
    }

    /// The current copy, read again if it is older than [`RULES_STALENESS`].
    pub async fn current(&self) -> Result<Arc<Book>, StoreError> {
        let generation = {
            let copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((read_at, book)) = &copy.book
                && read_at.elapsed() < RULES_STALENESS
            {
                return Ok(book.clone());
            }
            copy.generation
        };
        let read_at = Instant::now();
        let mut book = Book { default_tz: self.default_tz, ..Book::default() };
        for rule in self.rules.enabled_rules().await? {
            book.by_type.entry(rule.trigger_type.clone()).or_default().push(PlanRule::new(rule));
        }
        let book = Arc::new(book);
        let mut copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
        // Invalidated while reading: this read may predate the change.
        if copy.generation == generation {
            copy.book = Some((read_at, book.clone()));
        }
        Ok(book)
    }

    /// Drops the copy: a rule changed through this instance. Called after
    /// the change is committed, so the next read sees it; a read already
    /// in flight is not kept (see [`RuleBook`]).
    pub fn invalidate(&self) {
        let mut copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
        copy.generation += 1;
        copy.book = None;
    }

    /// The recipients the triggers' conditions need, in one query.
    pub async fn recipients_for(
        &self,
        book: &Book,
        triggers: &[&TriggerRow],
    ) -> Result<HashMap<String, RecipientRow>, StoreError> {
        let users: Vec<&str> =
            triggers.iter().filter(|t| book.needs_recipient(&t.trigger_type)).map(|t| t.user_id.as_str()).collect();
        Ok(self.store.recipients_by_ids(&users).await?.into_iter().map(|r| (r.user_id.clone(), r)).collect())
    }
}

#[derive(Clone)]
pub struct Planner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    rules: Arc<RuleBook>,
    poll: Duration,
    batch: u32,
}

impl Planner {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, poll: Duration, batch: u32) -> Planner {
        let rules = Arc::new(RuleBook::new(store.clone()));
        Planner::with_rules(store, clock, rules, poll, batch)
    }

    /// A planner sharing a [`RuleBook`] (with the API's intake).
    pub fn with_rules(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        rules: Arc<RuleBook>,
        poll: Duration,
        batch: u32,
    ) -> Planner {
        Planner { store, clock, rules, poll, batch }
    }

    pub fn rules(&self) -> &Arc<RuleBook> {
        &self.rules
    }

    /// Plans these triggers (inserted unplanned), all in one transaction;
    /// answers, per trigger, its plan if this planner planned it (`None` when
    /// another planner had already).
    pub async fn plan_all(&self, triggers: &[TriggerRow]) -> Result<Vec<Option<Plan>>, StoreError> {
        let book = self.rules.current().await?;
        let refs: Vec<&TriggerRow> = triggers.iter().collect();
        let recipients = self.rules.recipients_for(&book, &refs).await?;
        let now = self.clock.now();
        let plans: Vec<Plan> = triggers.iter().map(|t| book.plan_as_of(t, &recipients, now)).collect();
        let writes: Vec<TriggerPlan> = triggers
            .iter()
            .zip(&plans)
            .map(|(t, p)| TriggerPlan {
                trigger_id: t.id.clone(),
                rows: p.rows.clone(),
                digests: p.digests.clone(),
                detail: p.detail(&t.trigger_type),
            })
            .collect();
        let won = self.store.plan_triggers(&writes, now).await?;
        Ok(plans.into_iter().zip(won).map(|(p, won)| won.then_some(p)).collect())
    }

    /// Plans one trigger. `None` when another planner had already planned it.
    pub async fn plan(&self, trigger: &TriggerRow) -> Result<Option<Plan>, StoreError> {
        Ok(self.plan_all(std::slice::from_ref(trigger)).await?.pop().flatten())
    }

    /// Plans up to a batch of unplanned triggers; returns how many it planned.
    pub async fn tick(&self) -> Result<usize, StoreError> {
        let pending = self.store.unplanned_triggers(self.batch).await?;
        if pending.is_empty() {
            return Ok(0);
        }
        match self.plan_all(&pending).await {
            Ok(plans) => Ok(plans.iter().filter(|p| p.is_some()).count()),
            // One trigger the database refuses must not hold back the rest:
            // plan them one at a time, and say which one failed.
            Err(e) if crate::batch::worth_splitting(&e, pending.len()) => {
                tracing::warn!(error = %e, "planning a batch of triggers failed; planning them one by one");
                let each = crate::batch::one_by_one(&pending, |one| self.plan_all(one)).await;
                let mut planned = 0;
                for (trigger, result) in pending.iter().zip(each) {
                    match result {
                        Ok(Some(_)) => planned += 1,
                        Ok(None) => {}
                        Err(e) => tracing::error!(trigger = %trigger.id, error = %e, "could not plan trigger"),
                    }
                }
                Ok(planned)
            }
            Err(e) => Err(e),
        }
    }

    /// Sweeps for triggers a host application inserted itself.
    pub async fn run(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let pause = match self.tick().await {
                Ok(n) if n as u32 >= self.batch => Duration::ZERO,
                Ok(_) => self.poll,
                Err(e) if e.is_lost_race() => {
                    crate::store::race::count("plan triggers");
                    tracing::debug!(error = %e, "planner sweep lost a race with another instance; trying again");
                    Duration::from_millis(rand::random_range(5..=50))
                }
                Err(e) if e.is_unavailable() => {
                    tracing::warn!(error = %e, "planner sweep failed: the database is unavailable");
                    Duration::from_secs(1)
                }
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
