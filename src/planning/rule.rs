//! Rules: what an operator switched on. Parsing and validating what the API
//! receives, so the store only ever holds rules that compile.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::delivery::channel::push::PushOptions;
use crate::delivery::channel::slack::SlackOptions;
use crate::delivery::channel::webhook::WebhookPolicy;
use crate::domain::{InvalidValue, NUL_REFUSED, TriggerType};
use crate::planning::template::{Condition, TemplateError, TemplateSet};
use crate::planning::workflow::{DigestInput, EscalationInput, SendWindowInput, ThrottleInput, WorkflowInput};
use crate::store::{RuleRow, new_id};

/// The body of `POST /v1/rules`.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleInput {
    /// A name for people: "Welcome email", "Export ready".
    pub name: String,
    /// The trigger type this rule answers, e.g. `export.ready`: 1 to 128
    /// characters from letters, digits and `. _ - : /`, as `POST
    /// /v1/triggers` accepts for `type`.
    pub trigger_type: String,
    /// Optional minijinja expression over `payload`, `user` and `trigger`,
    /// e.g. `payload.amount > 100`. The rule plans nothing when it is false.
    #[serde(default)]
    pub condition: Option<String>,
    /// `inbox`, `email` or `webhook`; any other name is refused (422). A rule
    /// on a channel this instance has not configured (email without
    /// `email.transport`, webhook without `webhook.signing_secret`) can be
    /// saved off but not turned on.
    pub channel: String,
    pub template: TemplateSet,
    /// Seconds from the trigger's `occurred_at` until the message is due.
    #[serde(default)]
    pub delay: i64,
    /// Seconds after the due time past which the message expires undelivered.
    #[serde(default)]
    pub grace: Option<i64>,
    /// The preference category users can opt out of, e.g. `product_updates`.
    pub category: String,
    /// Off unless said otherwise: a fresh rule plans nothing until an
    /// operator turns it on.
    #[serde(default)]
    pub enabled: bool,
    /// For `channel: "webhook"`: where to POST. Must be a public http(s) URL
    /// unless the deployment allows private networks.
    #[serde(default)]
    pub webhook_url: Option<String>,
    /// When messages may go, in the recipient's time zone: e.g.
    /// `{"days": ["mon","tue","wed","thu","fri"], "from": "09:00", "until": "18:00"}`.
    #[serde(default)]
    pub send_window: Option<SendWindowInput>,
    /// Folds a burst of triggers for one user (and key) into one message:
    /// `{"window": 3600, "key": "payload.thread_id", "max_items": 50}`.
    #[serde(default)]
    pub digest: Option<DigestInput>,
    /// At most `limit` messages to a user in any `per` seconds, checked at
    /// delivery; the rest end `suppressed`, naming the cap.
    #[serde(default)]
    pub throttle: Option<ThrottleInput>,
    /// On an inbox rule, a follow-up (by email, push, SMS or Slack) unless
    /// the inbox message was read (`unless: read`), or seen or read
    /// (`unless: seen`), in time: one object, or a list of up to 3 steps,
    /// each `after` counted from the inbox delivery and greater than the
    /// last, the chain's `unless` on its first step.
    #[serde(default)]
    pub escalate: Option<EscalationInput>,
    /// The category's name in the end user's preference center.
    #[serde(default)]
    pub display_name: Option<String>,
    /// What the category's messages are about, for the preference center.
    #[serde(default)]
    pub description: Option<String>,
    /// For `channel: "push"`: `{"ttl": SECONDS, "urgency": "very-low"|"low"|"normal"|"high"}`.
    #[serde(default)]
    pub push: Option<PushOptions>,
    /// For `channel: "slack"`: `{"channel": "C…"}` posts every message of
    /// the rule in that conversation instead of each user's DM.
    #[serde(default)]
    pub slack: Option<SlackOptions>,
}

impl RuleInput {
    /// A rule with what every rule must name and everything else as the API
    /// leaves it when a body does not say: no condition, no delay or grace,
    /// off, no webhook, no workflow.
    pub fn new(name: String, trigger_type: String, channel: String, template: TemplateSet, category: String) -> Self {
        RuleInput {
            name,
            trigger_type,
            condition: None,
            channel,
            template,
            delay: 0,
            grace: None,
            category,
            enabled: false,
            webhook_url: None,
            send_window: None,
            digest: None,
            throttle: None,
            escalate: None,
            display_name: None,
            description: None,
            push: None,
            slack: None,
        }
    }
}

/// The body of `PATCH /v1/rules/{id}`: any subset of the fields.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RulePatch {
    pub name: Option<String>,
    pub trigger_type: Option<String>,
    /// `null` removes the condition.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub condition: Option<Option<String>>,
    pub channel: Option<String>,
    pub template: Option<TemplateSet>,
    pub delay: Option<i64>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<i64>)]
    pub grace: Option<Option<i64>>,
    pub category: Option<String>,
    pub enabled: Option<bool>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub webhook_url: Option<Option<String>>,
    /// `null` removes the send window; likewise for the fields below.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<SendWindowInput>)]
    pub send_window: Option<Option<SendWindowInput>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<DigestInput>)]
    pub digest: Option<Option<DigestInput>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<ThrottleInput>)]
    pub throttle: Option<Option<ThrottleInput>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<EscalationInput>)]
    pub escalate: Option<Option<EscalationInput>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub display_name: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<PushOptions>)]
    pub push: Option<Option<PushOptions>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<SlackOptions>)]
    pub slack: Option<Option<SlackOptions>>,
}

fn double_option<'de, T: Deserialize<'de>, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// One thing wrong with a rule, for a 422 that names it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { field: field.into(), message: message.into(), line: None, column: None }
    }
}

impl From<&TemplateError> for FieldError {
    fn from(e: &TemplateError) -> Self {
        FieldError { field: e.field().to_owned(), message: e.to_string(), line: e.line(), column: e.column() }
    }
}

impl From<InvalidValue> for FieldError {
    fn from(e: InvalidValue) -> Self {
        FieldError::new(e.field, e.to_string())
    }
}

/// A year: longer delays are almost certainly a unit mistake (milliseconds
/// given as seconds), and such a row would sit in the outbox for years.
const MAX_DELAY: i64 = 366 * 24 * 3600;

/// Longest webhook URL: far above any real endpoint, far below the column.
const MAX_URL_BYTES: usize = 2048;

fn check_text(errors: &mut Vec<FieldError>, field: &str, value: &str, max: usize) {
    if value.trim().is_empty() || value.len() > max || value.chars().any(char::is_control) {
        errors.push(FieldError::new(field, format!("must be 1 to {max} characters without control characters")));
    }
}

/// Checks every field of a complete rule and reports every problem at once.
pub fn validate(input: &RuleInput, webhooks: &WebhookPolicy) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    check_text(&mut errors, "name", &input.name, 255);
    // The trigger API's own check: a type it refuses could never match.
    if let Err(e) = TriggerType::parse("trigger_type", &input.trigger_type) {
        errors.push(e.into());
    }
    if let Err(e) = crate::planning::category::check("category", &input.category) {
        errors.push(e);
    }
    // A name Herald does not have is refused here, not when the first
    // message falls due: `"emial"` would otherwise be saved, turned on, and
    // fail every message it planned.
    if let Err(e) = crate::delivery::channel::catalog::check_known(&input.channel) {
        errors.push(FieldError::new("channel", e));
    }
    if !(0..=MAX_DELAY).contains(&input.delay) {
        errors.push(FieldError::new("delay", format!("must be 0 to {MAX_DELAY} seconds")));
    }
    if let Some(g) = input.grace
        && !(0..=MAX_DELAY).contains(&g)
    {
        errors.push(FieldError::new("grace", format!("must be 0 to {MAX_DELAY} seconds, or null for no expiry")));
    }
    if let Some(c) = &input.condition {
        if c.contains('\0') {
            errors.push(FieldError::new("condition", NUL_REFUSED));
        } else if let Err(e) = Condition::compile(c) {
            errors.push((&e).into());
        }
    }
    match (&input.webhook_url, input.channel == "webhook") {
        (None, true) => errors.push(FieldError::new("webhook_url", "required when channel is \"webhook\"")),
        (Some(_), false) => errors.push(FieldError::new("webhook_url", "only used with channel \"webhook\"")),
        (Some(url), true) if url.contains('\0') => errors.push(FieldError::new("webhook_url", NUL_REFUSED)),
        // Stored as given, in a column that holds 65,535 bytes on MariaDB.
        (Some(url), true) if url.len() > MAX_URL_BYTES => {
            errors.push(FieldError::new("webhook_url", format!("must be at most {MAX_URL_BYTES} characters")))
        }
        (Some(url), true) => {
            if let Err(e) = webhooks.check_url(url) {
                errors.push(FieldError::new("webhook_url", e));
            }
        }
        (None, false) => {}
    }
    if let Err(template_errors) = input.template.validate() {
        errors.extend(template_errors.iter().map(FieldError::from));
    }
    errors.extend(input.template.check_shape(&input.channel).iter().map(FieldError::from));
    let options = [
        ("push", input.push.is_some(), input.push.and_then(|o| o.problem())),
        ("slack", input.slack.is_some(), input.slack.as_ref().and_then(|o| o.problem())),
    ];
    for (channel, given, problem) in options {
        match (given, input.channel == channel) {
            (true, false) => errors.push(FieldError::new(channel, format!("only used with channel \"{channel}\""))),
            (true, true) => errors.extend(problem.map(|(field, message)| FieldError::new(field, message))),
            (false, _) => {}
        }
    }
    crate::planning::workflow::validate(
        &input.workflow(),
        &input.channel,
        |name| crate::delivery::channel::catalog::check_known(name).map_err(|e| e.to_string()),
        &mut errors,
    );
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

impl RuleInput {
    /// The workflow fields, as stored.
    pub fn workflow(&self) -> WorkflowInput {
        WorkflowInput {
            send_window: self.send_window.clone(),
            digest: self.digest.clone(),
            throttle: self.throttle.clone(),
            escalate: self.escalate.clone(),
            display_name: self.display_name.clone(),
            description: self.description.clone(),
            push: self.push,
            slack: self.slack.clone(),
        }
    }

    /// Validates and builds the row to store.
    pub fn into_row(self, now: Millis, webhooks: &WebhookPolicy) -> Result<RuleRow, Vec<FieldError>> {
        validate(&self, webhooks)?;
        Ok(self.build(now))
    }

    /// An edit of the stored rule `before`, checked like a new rule except
    /// for two values that later checks refuse, when the edit leaves them as
    /// they were: a `trigger_type` the trigger API refuses (a host writing
    /// `engagement_triggers` itself may use it, so the rule may work), and a
    /// webhook follow-up on a rule that stays off. Refusing those would
    /// keep an operator from turning such a rule off, or fixing it a field
    /// at a time; a rule that escalates to webhook cannot be turned on.
    pub fn into_row_edited(
        self,
        before: &RuleInput,
        now: Millis,
        webhooks: &WebhookPolicy,
    ) -> Result<RuleRow, Vec<FieldError>> {
        if let Err(errors) = validate(&self, webhooks) {
            let left: Vec<FieldError> = errors.into_iter().filter(|e| !self.kept_from(before, e)).collect();
            if !left.is_empty() {
                return Err(left);
            }
        }
        Ok(self.build(now))
    }

    /// Whether `error` is about a value `before` already had and may keep.
    fn kept_from(&self, before: &RuleInput, error: &FieldError) -> bool {
        match error.field.as_str() {
            "trigger_type" => self.trigger_type == before.trigger_type,
            f if f.starts_with("escalate") && f.ends_with(".channel") => {
                let step = match f.strip_prefix("escalate[").and_then(|r| r.strip_suffix("].channel")) {
                    Some(i) => i.parse::<usize>().ok(),
                    None => (f == "escalate.channel").then_some(0),
                };
                !self.enabled
                    && self.escalate == before.escalate
                    && step.and_then(|i| self.escalate.as_ref()?.steps().get(i)).is_some_and(|s| s.channel == "webhook")
            }
            _ => false,
        }
    }

    fn build(self, now: Millis) -> RuleRow {
        let workflow = self.workflow();
        RuleRow {
            id: new_id(),
            name: self.name,
            trigger_type: self.trigger_type,
            condition: self.condition.filter(|c| !c.trim().is_empty()),
            channel: self.channel,
            template: serde_json::to_value(&self.template).expect("a template set serialises"),
            delay_seconds: self.delay,
            grace_seconds: self.grace,
            category: self.category,
            enabled: self.enabled,
            workflow: (!workflow.is_empty()).then(|| serde_json::to_value(&workflow).expect("a workflow serialises")),
            webhook_url: self.webhook_url,
            created_at: now,
            updated_at: now,
        }
    }

    /// The editable view of a stored rule, so a patch can be applied to it
    /// and the result validated as a whole.
    pub fn from_row(row: &RuleRow) -> Result<RuleInput, serde_json::Error> {
        let w: WorkflowInput = row.workflow.clone().map(serde_json::from_value).transpose()?.unwrap_or_default();
        Ok(RuleInput {
            send_window: w.send_window,
            digest: w.digest,
            throttle: w.throttle,
            escalate: w.escalate,
            display_name: w.display_name,
            description: w.description,
            push: w.push,
            slack: w.slack,
            name: row.name.clone(),
            trigger_type: row.trigger_type.clone(),
            condition: row.condition.clone(),
            channel: row.channel.clone(),
            template: serde_json::from_value(row.template.clone())?,
            delay: row.delay_seconds,
            grace: row.grace_seconds,
            category: row.category.clone(),
            enabled: row.enabled,
            webhook_url: row.webhook_url.clone(),
        })
    }

    pub fn apply(&mut self, patch: RulePatch) {
        if let Some(v) = patch.name {
            self.name = v;
        }
        if let Some(v) = patch.trigger_type {
            self.trigger_type = v;
        }
        if let Some(v) = patch.condition {
            self.condition = v;
        }
        if let Some(v) = patch.channel {
            self.channel = v;
        }
        if let Some(v) = patch.template {
            self.template = v;
        }
        if let Some(v) = patch.delay {
            self.delay = v;
        }
        if let Some(v) = patch.grace {
            self.grace = v;
        }
        if let Some(v) = patch.category {
            self.category = v;
        }
        if let Some(v) = patch.enabled {
            self.enabled = v;
        }
        if let Some(v) = patch.webhook_url {
            self.webhook_url = v;
        }
        if let Some(v) = patch.send_window {
            self.send_window = v;
        }
        if let Some(v) = patch.digest {
            self.digest = v;
        }
        if let Some(v) = patch.throttle {
            self.throttle = v;
        }
        if let Some(v) = patch.escalate {
            self.escalate = v;
        }
        if let Some(v) = patch.display_name {
            self.display_name = v;
        }
        if let Some(v) = patch.description {
            self.description = v;
        }
        if let Some(v) = patch.push {
            self.push = v;
        }
        if let Some(v) = patch.slack {
            self.slack = v;
        }
    }
}

/// How a rule is shown by the API.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RuleView {
    pub id: String,
    pub name: String,
    pub trigger_type: String,
    pub condition: Option<String>,
    pub channel: String,
    #[schema(value_type = Object)]
    pub template: serde_json::Value,
    pub delay: i64,
    pub grace: Option<i64>,
    pub category: String,
    pub enabled: bool,
    pub webhook_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_window: Option<SendWindowInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escalate: Option<EscalationInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<PushOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackOptions>,
    /// RFC 3339
    pub created_at: String,
    pub updated_at: String,
    /// What stands in the way of this rule's messages on this instance, e.g.
    /// its channel is not configured. Absent when nothing does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl RuleView {
    /// The view, with a warning when its channel cannot deliver here.
    pub fn new(row: &RuleRow, channels: &crate::delivery::channel::catalog::Channels) -> RuleView {
        let mut view = RuleView::from(row);
        if let Some(why) = channels.not_live(&row.channel) {
            let consequence = if row.enabled {
                "every message it plans ends failed until then"
            } else {
                "it cannot be turned on until then"
            };
            view.warnings.push(format!("{why}; {consequence}"));
        }
        view
    }
}

impl From<&RuleRow> for RuleView {
    fn from(r: &RuleRow) -> Self {
        let w: WorkflowInput = r.workflow.clone().and_then(|w| serde_json::from_value(w).ok()).unwrap_or_default();
        RuleView {
            send_window: w.send_window,
            digest: w.digest,
            throttle: w.throttle,
            escalate: w.escalate,
            display_name: w.display_name,
            description: w.description,
            push: w.push,
            slack: w.slack,
            id: r.id.clone(),
            name: r.name.clone(),
            trigger_type: r.trigger_type.clone(),
            condition: r.condition.clone(),
            channel: r.channel.clone(),
            template: r.template.clone(),
            delay: r.delay_seconds,
            grace: r.grace_seconds,
            category: r.category.clone(),
            enabled: r.enabled,
            webhook_url: r.webhook_url.clone(),
            created_at: r.created_at.to_rfc3339(),
            updated_at: r.updated_at.to_rfc3339(),
            warnings: Vec::new(),
        }
    }
}

/// Each locale's text rendered with `ctx` (an empty payload at save, see
/// [`empty_context`]; the sample in the preview) and measured as SMS: the problems of those over
/// `max` segments (`sms.max_segments`), naming the locale's `text`. A text
/// that does not render with this payload is not measured: its render
/// error is the preview's to show, and an empty payload is only a lower
/// bound on what a real one renders.
/// `rendered_with` says with what, in the message ("with an empty payload
/// already", "with the sample").
pub fn sms_segment_problems(
    template: &TemplateSet,
    ctx: &serde_json::Value,
    max: usize,
    rendered_with: &str,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for tag in template.locales.keys() {
        let Ok(rendered) = template.render(Some(tag), ctx) else { continue };
        if let Err(e) = crate::delivery::channel::sms::segments::within(&rendered.text, max) {
            errors.push(FieldError::new(
                format!("template.locales.{tag}.text"),
                format!("{e}, set by sms.max_segments; {rendered_with}"),
            ));
        }
    }
    errors
}

/// The context a rule renders with when there is no sample: an empty
/// payload, a user with an id only.
pub fn empty_context(trigger_type: &str) -> serde_json::Value {
    serde_json::json!({"payload": {}, "user": {"id": "sample"}, "trigger": {"id": "sample", "type": trigger_type}})
}

/// "GSM-7, 2 segments (170 septets)": what a text costs, for the preview.
pub fn sms_measure(text: &str) -> String {
    use crate::delivery::channel::sms::segments::{Encoding, measure};
    let m = measure(text);
    let unit = if m.encoding == Encoding::Gsm7 { "septets" } else { "UTF-16 units" };
    let s = if m.segments == 1 { "" } else { "s" };
    format!("{}, {} segment{s} ({} {unit})", m.encoding, m.segments, m.units)
}
