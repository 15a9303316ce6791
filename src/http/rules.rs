//! `/v1/rules`: what operators switched on, and what switching on would do.

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::problem::{ApiError, ApiJson, ApiPath, ApiQuery, Problem};
use super::responses::{BadRequest, Invalid, NotFound, NotJson, TooLarge, Unauthorized};
use super::{AppState, audit_api};
use crate::planning::planner::{self, RuleDecision};
use crate::planning::rule::{FieldError, RuleInput, RulePatch, RuleView};
use crate::store::{CancelScope, RuleRow};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RuleList {
    pub rules: Vec<RuleView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RuleChanged {
    pub rule: RuleView,
    /// Scheduled messages cancelled by this change (disabling a rule).
    pub cancelled: u64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RuleDeleted {
    pub id: String,
    /// Scheduled messages cancelled because the rule is gone.
    pub cancelled: u64,
}

pub async fn load(state: &AppState, id: &str) -> Result<RuleRow, ApiError> {
    state.store.get_rule(id).await?.ok_or_else(|| ApiError::NotFound(format!("no rule with id {id:?}")))
}

/// Creates a rule. It is disabled unless `enabled: true` is sent.
#[utoipa::path(post, path = "/v1/rules", tag = "rules", request_body = RuleInput,
    responses(
        (status = 201, body = RuleView),
        (status = 422, description = "A field or template refused; template errors carry line and column", body = Problem, content_type = "application/problem+json"),
        BadRequest, Unauthorized, TooLarge, NotJson,
    ),
    security(("api_key" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(input): ApiJson<RuleInput>,
) -> Result<(StatusCode, ApiJson<RuleView>), ApiError> {
    let row = create_rule(&state, input).await?;
    let detail =
        format!("\"{}\" on {}, created {}", row.name, row.trigger_type, if row.enabled { "on" } else { "off" });
    audit_api(&state, &caller, "rule.create", &row.id, Some(detail)).await;
    Ok((StatusCode::CREATED, ApiJson(RuleView::new(&row, &state.channels))))
}

/// Validates and stores a new rule (the API and the operator screen).
pub async fn create_rule(state: &AppState, input: RuleInput) -> Result<RuleRow, ApiError> {
    refuse_long_texts(state, &input)?;
    let row = input.into_row(state.clock.now(), &state.webhooks).map_err(ApiError::Invalid)?;
    if row.enabled {
        refuse_unconfigured_channel(state, &row.channel)?;
        refuse_unconfigured_follow_up(state, &row)?;
    }
    state.store.insert_rule(&row).await?;
    state.planner.rules().invalidate();
    tracing::info!(rule = %row.id, name = %row.name, enabled = row.enabled, "rule created");
    Ok(row)
}

#[utoipa::path(get, path = "/v1/rules", tag = "rules",
    responses((status = 200, body = RuleList), Unauthorized),
    security(("api_key" = [])))]
pub async fn list(State(state): State<AppState>) -> Result<ApiJson<RuleList>, ApiError> {
    let rules = state.store.list_rules().await?;
    Ok(ApiJson(RuleList { rules: rules.iter().map(|r| RuleView::new(r, &state.channels)).collect() }))
}

#[utoipa::path(get, path = "/v1/rules/{id}", tag = "rules", params(("id" = String, Path)),
    responses((status = 200, body = RuleView), Unauthorized, NotFound),
    security(("api_key" = [])))]
pub async fn get(State(state): State<AppState>, ApiPath(id): ApiPath<String>) -> Result<ApiJson<RuleView>, ApiError> {
    Ok(ApiJson(RuleView::new(&load(&state, &id).await?, &state.channels)))
}

/// Changes any subset of a rule's fields. Disabling it cancels its
/// still-scheduled messages ("rule disabled").
#[utoipa::path(patch, path = "/v1/rules/{id}", tag = "rules", params(("id" = String, Path)), request_body = RulePatch,
    responses((status = 200, body = RuleChanged), BadRequest, Unauthorized, NotFound, TooLarge, NotJson, Invalid),
    security(("api_key" = [])))]
pub async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(patch): ApiJson<RulePatch>,
) -> Result<ApiJson<RuleChanged>, ApiError> {
    let switched = patch.enabled;
    let was_enabled = load(&state, &id).await?.enabled;
    let changed = update_rule(&state, &id, patch).await?;
    let name = &changed.rule.name;
    // The same actions the screen records: a switch is its own entry.
    let (action, detail) = match switched {
        Some(true) if !was_enabled => ("rule.enable", format!("\"{name}\" turned on")),
        Some(false) if was_enabled => {
            ("rule.disable", format!("\"{name}\" turned off; {} scheduled message(s) cancelled", changed.cancelled))
        }
        _ => ("rule.update", format!("saved \"{name}\"")),
    };
    audit_api(&state, &caller, action, &id, Some(detail)).await;
    Ok(ApiJson(changed))
}

/// Applies a patch to a stored rule and validates the result as a whole;
/// disabling cancels the rule's scheduled messages. The API's PATCH and the
/// operator screen's switch and editor all come through here.
pub async fn update_rule(state: &AppState, id: &str, patch: RulePatch) -> Result<RuleChanged, ApiError> {
    let current = load(state, id).await?;
    let mut input = RuleInput::from_row(&current).map_err(|e| ApiError::Store(stored_template(id, e)))?;
    let before = input.clone();
    input.apply(patch);
    let now = state.clock.now();
    if input.template != before.template || input.channel != before.channel {
        refuse_long_texts(state, &input)?;
    }
    let mut next = input.into_row_edited(&before, now, &state.webhooks).map_err(ApiError::Invalid)?;
    // Only when turning it on (or moving an enabled rule to another
    // channel): an enabled rule whose channel lost its setting can still be
    // edited, and turned off.
    if next.enabled && (!current.enabled || current.channel != next.channel) {
        refuse_unconfigured_channel(state, &next.channel)?;
    }
    if next.enabled && (!current.enabled || current.workflow != next.workflow) {
        refuse_unconfigured_follow_up(state, &next)?;
    }
    next.id = current.id.clone();
    next.created_at = current.created_at;
    if !state.store.update_rule(&next).await? {
        return Err(ApiError::NotFound(format!("no rule with id {id:?}")));
    }
    state.planner.rules().invalidate();
    let cancelled = if current.enabled && !next.enabled {
        state.store.cancel_scheduled(CancelScope::Rule(id), "rule disabled", now).await?
    } else {
        0
    };
    tracing::info!(rule = %id, enabled = next.enabled, cancelled, "rule updated");
    Ok(RuleChanged { rule: RuleView::new(&next, &state.channels), cancelled })
}

/// A rule cannot be turned on for a channel this instance cannot deliver
/// on: every message it planned would end `failed`. Saved off, it is kept
/// (with a warning in its view), so rules can be prepared before the
/// channel's setting is.
fn refuse_unconfigured_channel(state: &AppState, channel: &str) -> Result<(), ApiError> {
    match state.channels.not_live(channel) {
        Some(why) => Err(ApiError::field("channel", format!("{why}; until then the rule can only be saved off"))),
        None => Ok(()),
    }
}

/// An SMS rule whose text renders over `sms.max_segments` even with an
/// empty payload: every message it planned would be at least that long.
/// (The API has no sample payload; the screen's preview measures its
/// sample, see `crate::planning::rule::sms_measure`.)
///
/// An SMS follow-up step of an escalation is measured the same way, its
/// errors named by the step (`escalate[1].template.locales.en.text`).
fn refuse_long_texts(state: &AppState, input: &crate::planning::rule::RuleInput) -> Result<(), ApiError> {
    let ctx = crate::planning::rule::empty_context(&input.trigger_type);
    let measure = |template| {
        crate::planning::rule::sms_segment_problems(
            template,
            &ctx,
            state.sms_max_segments,
            "with an empty payload already",
        )
    };
    let mut errors = if input.channel == "sms" { measure(&input.template) } else { Vec::new() };
    if let Some(escalate) = &input.escalate {
        for (i, step) in escalate.steps().iter().enumerate().filter(|(_, s)| s.channel == "sms") {
            errors.extend(measure(&step.template).into_iter().map(|mut e| {
                e.field = format!("{}.{}", escalate.field(i), e.field);
                e
            }));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(ApiError::Invalid(errors)) }
}

/// Likewise for an escalation's follow-up channels, every step's: every
/// follow-up on a channel this instance cannot deliver on would end
/// `failed`. The first such step is named (`escalate.channel`, or
/// `escalate[i].channel` in a chain).
fn refuse_unconfigured_follow_up(state: &AppState, row: &RuleRow) -> Result<(), ApiError> {
    let Some(escalate) =
        crate::planning::workflow::RuleWorkflow::from_stored(row.workflow.as_ref()).ok().and_then(|w| w.escalate)
    else {
        return Ok(());
    };
    let errors: Vec<FieldError> = escalate
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, step)| {
            let why = state.channels.not_live(&step.channel)?;
            Some(FieldError::new(
                format!("{}.channel", escalate.field(i + 1)),
                format!("{why}; until then the rule can only be saved off"),
            ))
        })
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(ApiError::Invalid(errors)) }
}

fn stored_template(id: &str, e: serde_json::Error) -> crate::store::StoreError {
    crate::store::StoreError::CorruptRow { table: "engagement_rules", column: "template", value: format!("{id}: {e}") }
}

/// Deletes a rule and cancels its still-scheduled messages ("rule deleted").
#[utoipa::path(delete, path = "/v1/rules/{id}", tag = "rules", params(("id" = String, Path)),
    responses((status = 200, body = RuleDeleted), Unauthorized, NotFound),
    security(("api_key" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<ApiJson<RuleDeleted>, ApiError> {
    let (rule, cancelled) = delete_rule(&state, &id).await?;
    let detail = format!("\"{}\" deleted; {cancelled} scheduled message(s) cancelled", rule.name);
    audit_api(&state, &caller, "rule.delete", &id, Some(detail)).await;
    Ok(ApiJson(RuleDeleted { id, cancelled }))
}

/// Deletes a rule and cancels its still-scheduled messages ("rule deleted"):
/// the rule as it was, and how many were cancelled. The API and the
/// operator screen both come through here.
pub async fn delete_rule(state: &AppState, id: &str) -> Result<(RuleRow, u64), ApiError> {
    let rule = load(state, id).await?;
    let now = state.clock.now();
    let cancelled = state.store.cancel_scheduled(CancelScope::Rule(id), "rule deleted", now).await?;
    state.store.delete_rule(id).await?;
    state.planner.rules().invalidate();
    tracing::info!(rule = %id, cancelled, "rule deleted");
    Ok((rule, cancelled))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PreviewQuery {
    /// Trigger type to look at [default: the rule's own]
    pub trigger_type: Option<String>,
    /// How many recent triggers to consider (1 to 500) [default: 50]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PreviewItem {
    pub trigger_id: String,
    pub user_id: String,
    pub occurred_at: String,
    #[serde(flatten)]
    pub decision: RuleDecision,
    /// For a message it would plan: what the rule's send window (and the
    /// recipient's quiet hours), digest and frequency cap would do with it.
    #[serde(flatten)]
    pub workflow: crate::planning::dry_run::WorkflowNotes,
    /// For a message an SMS rule would plan: what its text would cost,
    /// rendered with this trigger and recipient as the worker would.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sms: Option<SmsCost>,
}

/// What one text costs as SMS.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SmsCost {
    /// `GSM-7`, or `UCS-2` when a character GSM-7 cannot carry forces it.
    pub encoding: String,
    /// Segments the carrier bills.
    pub segments: usize,
    /// Septets (GSM-7) or UTF-16 code units (UCS-2).
    pub units: usize,
    /// Whether the text stays within `sms.max_segments`; the worker sends
    /// a longer one, but the rule's save refuses a template whose text is
    /// longer with an empty payload already.
    pub within_max_segments: bool,
}

/// The SMS cost of an SMS rule's `template` for trigger `t`: `None` for a
/// text that does not render (the worker would record that as the
/// message's failure).
fn sms_cost(
    template: &crate::planning::template::TemplateSet,
    t: &crate::store::TriggerRow,
    recipient: Option<&crate::store::RecipientRow>,
    max_segments: usize,
) -> Option<SmsCost> {
    let ctx = planner::context(t, recipient);
    let rendered = template.render(recipient.and_then(|r| r.locale.as_deref()), &ctx).ok()?;
    let m = crate::delivery::channel::sms::segments::measure(&rendered.text);
    Some(SmsCost {
        encoding: m.encoding.to_string(),
        segments: m.segments,
        units: m.units,
        within_max_segments: m.segments <= max_segments,
    })
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Preview {
    pub rule_id: String,
    pub enabled: bool,
    pub trigger_type: String,
    pub triggers_considered: usize,
    /// How many of them this rule would have planned a message for.
    pub would_plan: usize,
    pub results: Vec<PreviewItem>,
}

/// A dry run: what this rule would plan for recent triggers, enabled or not.
/// Plans nothing.
#[utoipa::path(get, path = "/v1/rules/{id}/preview", tag = "rules", params(("id" = String, Path), PreviewQuery),
    responses((status = 200, body = Preview), BadRequest, Unauthorized, NotFound, Invalid),
    security(("api_key" = [])))]
pub async fn preview(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PreviewQuery>,
) -> Result<ApiJson<Preview>, ApiError> {
    let rule = load(&state, &id).await?;
    let limit = ApiError::page_limit(q.limit, 50, 500)?;
    Ok(ApiJson(dry_run(&state, &rule, q.trigger_type, limit).await?))
}

/// What `rule` would plan for the `limit` most recent triggers of its type
/// (or `trigger_type`), enabled or not; plans nothing. The API's preview and
/// the operator screen's "enable" confirmation both show this.
pub async fn dry_run(
    state: &AppState,
    rule: &RuleRow,
    trigger_type: Option<String>,
    limit: u32,
) -> Result<Preview, ApiError> {
    let trigger_type = trigger_type.unwrap_or_else(|| rule.trigger_type.clone());
    let recent = state.store.recent_triggers(&trigger_type, limit).await?;
    // Every recipient at once: conditions read them, and so do quiet hours
    // and time zones.
    let users: Vec<&str> = recent.iter().map(|t| t.user_id.as_str()).collect();
    let recipients: std::collections::HashMap<String, crate::store::RecipientRow> =
        state.store.recipients_by_ids(&users).await?.into_iter().map(|r| (r.user_id.clone(), r)).collect();
    let mut results = Vec::with_capacity(recent.len());
    let mut plans = Vec::with_capacity(recent.len());
    // An SMS rule's template, to measure its texts; none for other channels.
    let template = (rule.channel == "sms")
        .then(|| serde_json::from_value::<crate::planning::template::TemplateSet>(rule.template.clone()).ok())
        .flatten();
    for t in &recent {
        let recipient = recipients.get(&t.user_id);
        let plan = planner::evaluate(t, std::slice::from_ref(rule), recipient, state.default_timezone);
        if let Some(decision) = plan.decisions.first().cloned() {
            let sms = template
                .as_ref()
                .filter(|_| decision.planned)
                .and_then(|template| sms_cost(template, t, recipient, state.sms_max_segments));
            results.push(PreviewItem {
                trigger_id: t.id.clone(),
                user_id: t.user_id.clone(),
                occurred_at: t.occurred_at.to_rfc3339(),
                decision,
                workflow: Default::default(),
                sms,
            });
            plans.push((t, plan));
        }
    }
    // What the workflow would do, simulated oldest first.
    if let Ok(workflow) = crate::planning::workflow::RuleWorkflow::from_stored(rule.workflow.as_ref()) {
        let mut steps = Vec::new();
        let mut index = Vec::new();
        for (i, (t, plan)) in plans.iter().enumerate().rev() {
            if !plan.decisions.first().is_some_and(|d| d.planned) {
                continue;
            }
            index.push(i);
            steps.push(crate::planning::dry_run::Step {
                trigger_id: &t.id,
                user_id: &t.user_id,
                occurred_at: t.occurred_at,
                arrived_at: t.planned_at.unwrap_or(t.created_at),
                due_at: plan.rows.first().map(|r| r.due_at),
                digest_bucket: plan.digests.first().map(|d| d.bucket.as_str()),
                recipient: recipients.get(&t.user_id),
            });
        }
        let notes = crate::planning::dry_run::simulate(
            &rule.category,
            rule.delay_seconds,
            &workflow,
            state.default_timezone,
            &steps,
        );
        for (i, n) in index.into_iter().zip(notes) {
            results[i].workflow = n;
        }
    }
    Ok(Preview {
        rule_id: rule.id.clone(),
        enabled: rule.enabled,
        trigger_type,
        triggers_considered: recent.len(),
        would_plan: results.iter().filter(|r| r.decision.planned).count(),
        results,
    })
}
