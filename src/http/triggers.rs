//! `POST /v1/triggers`: something happened to a user.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::DateTime;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::AppState;
use super::problem::{ApiError, ApiJson};
use crate::clock::Millis;
use crate::domain::{TriggerType, UserId};
use crate::planning::intake::Accepted;
use crate::planning::planner::OCCURRED_AT_SKEW;
use crate::planning::rule::FieldError;
use crate::store::{DigestMembership, NewTrigger, OutboxRow, StoreError, TriggerRow, new_id};

#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerInput {
    /// What happened, e.g. `export.ready`: rules match on it.
    #[serde(rename = "type")]
    pub trigger_type: String,
    pub user_id: String,
    /// Anything the templates and conditions need, as a JSON object.
    #[serde(default, deserialize_with = "super::extract::null_is_a_value")]
    #[schema(value_type = Object)]
    pub payload: Option<serde_json::Value>,
    /// The same key again returns the first result and plans nothing new.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// When it happened, RFC 3339; defaults to now. Delays count from
    /// here. At most 5 minutes ahead of Herald's clock (a host's clock
    /// running fast); later is refused with a 422: use a rule's `delay`
    /// to send later.
    #[serde(default)]
    pub occurred_at: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PlannedMessage {
    pub id: String,
    pub rule_id: Option<String>,
    pub channel: String,
    /// RFC 3339
    pub due_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TriggerAccepted {
    pub trigger_id: String,
    /// True when this answers a repeated idempotency key.
    pub replayed: bool,
    /// The messages of its own it planned.
    pub planned: Vec<PlannedMessage>,
    /// The digests it went into (a rule with a digest plans no message of
    /// its own for it): which digest message, how many triggers it holds
    /// so far and when it is due.
    pub digests: Vec<DigestMembership>,
    /// Why it planned what it did, in words.
    pub detail: Option<String>,
}

/// The answer's digests, read after the commit (the transaction that
/// decides whether a trigger opens a digest or joins one is the store's),
/// and the plan detail with them in words.
async fn with_digests(
    state: &AppState,
    trigger_id: &str,
    detail: Option<String>,
) -> Result<(Vec<DigestMembership>, Option<String>), ApiError> {
    let digests = state.store.digests_of_trigger(trigger_id).await?;
    if digests.is_empty() {
        return Ok((digests, detail));
    }
    let words: Vec<String> = digests
        .iter()
        .map(|d| format!("in digest {} ({}, {} trigger(s) so far, due {})", d.digest_id, d.channel, d.items, d.due_at))
        .collect();
    let detail = Some(format!("{}; {}", detail.unwrap_or_default(), words.join("; ")));
    Ok((digests, detail))
}

fn planned_now(rows: &[crate::store::NewOutboxRow]) -> Vec<PlannedMessage> {
    rows.iter()
        .map(|r| PlannedMessage {
            id: r.id.clone(),
            rule_id: r.rule_id.clone(),
            channel: r.channel.as_str().to_owned(),
            due_at: r.due_at.to_rfc3339(),
        })
        .collect()
}

pub(super) fn planned(rows: &[OutboxRow]) -> Vec<PlannedMessage> {
    rows.iter()
        .map(|r| PlannedMessage {
            id: r.id.clone(),
            rule_id: r.rule_id.clone(),
            channel: r.channel.clone(),
            due_at: r.due_at.to_rfc3339(),
        })
        .collect()
}

/// Everything `POST /v1/triggers` checks before it touches the database,
/// reporting every field at fault at once. Public so the fuzz targets
/// ([`crate::tooling::fuzzing`]) run exactly the handler's checks, not a copy.
pub fn validate(input: &TriggerInput, now: Millis) -> Result<NewTrigger, ApiError> {
    let mut errors = Vec::new();
    if let Err(e) = TriggerType::parse("type", &input.trigger_type) {
        errors.push(e.into());
    }
    let user_id = UserId::parse("user_id", &input.user_id).map_err(|e| errors.push(e.into())).ok();
    let payload = input.payload.clone().unwrap_or_else(|| serde_json::json!({}));
    if !payload.is_object() {
        errors.push(FieldError::new("payload", "must be a JSON object"));
    }
    if let Some(k) = &input.idempotency_key
        && (k.is_empty() || k.len() > 255 || k.chars().any(char::is_control))
    {
        errors.push(FieldError::new("idempotency_key", "must be 1 to 255 characters without control characters"));
    }
    let latest = now.plus(OCCURRED_AT_SKEW);
    let occurred_at = match &input.occurred_at {
        None => Some(now),
        Some(s) => match DateTime::parse_from_rfc3339(s) {
            Ok(t) if t.timestamp_millis() > latest.0 => {
                errors.push(FieldError::new(
                    "occurred_at",
                    format!(
                        "{s:?} is in the future: a trigger says when something happened, so occurred_at may be at \
                         most {} ahead of Herald's clock (now {now}); leave it out for now, and use the rule's \
                         delay to send later",
                        humantime::format_duration(OCCURRED_AT_SKEW)
                    ),
                ));
                None
            }
            Ok(t) => Some(Millis(t.timestamp_millis())),
            Err(e) => {
                errors.push(FieldError::new(
                    "occurred_at",
                    format!("{s:?} is not an RFC 3339 time like \"2026-12-02T10:00:00Z\" ({e})"),
                ));
                None
            }
        },
    };
    let (Some(user_id), Some(occurred_at), true) = (user_id, occurred_at, errors.is_empty()) else {
        return Err(ApiError::Invalid(errors));
    };
    // Hash of what the caller sent (a JSON object with sorted keys), so a
    // reused key with a different body is told apart from a replay.
    let canonical = serde_json::to_string(&serde_json::json!({
        "type": input.trigger_type, "user_id": input.user_id, "payload": payload, "occurred_at": input.occurred_at,
    }))
    .expect("JSON values serialise");
    Ok(NewTrigger {
        id: new_id(),
        trigger_type: input.trigger_type.clone(),
        user_id,
        payload,
        idempotency_key: input.idempotency_key.clone(),
        request_hash: Some(hex::encode(Sha256::digest(canonical.as_bytes()))),
        occurred_at,
    })
}

/// Records a trigger and plans it at once.
#[utoipa::path(
    post, path = "/v1/triggers", tag = "triggers",
    request_body = TriggerInput,
    responses(
        (status = 202, description = "Recorded and planned", body = TriggerAccepted),
        (status = 400, description = "Malformed body", body = super::problem::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or unknown API key", body = super::problem::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Idempotency key reused with a different body", body = super::problem::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = super::problem::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not JSON", body = super::problem::Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field", body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("api_key" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    ApiJson(input): ApiJson<TriggerInput>,
) -> Result<(StatusCode, ApiJson<TriggerAccepted>), ApiError> {
    let now = state.clock.now();
    let trigger = validate(&input, now)?;
    let (id, request_hash, trigger_type) =
        (trigger.id.clone(), trigger.request_hash.clone(), trigger.trigger_type.clone());
    let first = match state.intake.accept(trigger).await.map_err(StoreError::Shared)? {
        Accepted::Created(plan) => {
            let mut detail = Some(plan.detail(&trigger_type));
            let mut digests = Vec::new();
            if !plan.digests.is_empty() {
                (digests, detail) = with_digests(&state, &id, detail).await?;
            }
            let planned = planned_now(&plan.rows);
            let body = TriggerAccepted { trigger_id: id, replayed: false, planned, digests, detail };
            return Ok((StatusCode::ACCEPTED, ApiJson(body)));
        }
        Accepted::Existing(first) => first,
    };
    if first.request_hash != request_hash {
        return Err(ApiError::Conflict(format!(
            "idempotency_key {:?} was already used for a different request (trigger {}); use a new key for a new event",
            first.idempotency_key.as_deref().unwrap_or_default(),
            first.id
        )));
    }
    let body = plan_and_describe(&state, &first, true).await?;
    Ok((StatusCode::ACCEPTED, ApiJson(body)))
}

/// Plans the trigger if nobody has yet, then reports what it planned. A
/// replay, or a request that lost the race to another planner, reads the
/// rows the first planning wrote.
async fn plan_and_describe(state: &AppState, row: &TriggerRow, replayed: bool) -> Result<TriggerAccepted, ApiError> {
    let detail = match (row.planned_at, &row.plan_detail) {
        // A replay of a planned trigger carries its answer already.
        (Some(_), detail) => detail.clone(),
        (None, _) => match state.planner.plan(row).await? {
            Some(plan) => Some(plan.detail(&row.trigger_type)),
            // Another planner got there first: read what it wrote.
            None => state.store.get_trigger(&row.id).await?.and_then(|t| t.plan_detail),
        },
    };
    let rows = state.store.outbox_for_trigger(&row.id).await?;
    let (digests, detail) = with_digests(state, &row.id, detail).await?;
    Ok(TriggerAccepted { trigger_id: row.id.clone(), replayed, planned: planned(&rows), digests, detail })
}
