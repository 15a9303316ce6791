//! `POST /v1/triggers`: something happened to a user, to a list of users,
//! or to everyone following a topic.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::DateTime;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::AppState;
use super::problem::{ApiError, ApiJson};
use crate::clock::Millis;
use crate::domain::{TopicKey, TriggerType, UserId};
use crate::planning::intake::Accepted;
use crate::planning::planner::OCCURRED_AT_SKEW;
use crate::planning::rule::FieldError;
use crate::store::{
    Audience, DigestMembership, NewFanOut, NewTrigger, OutboxRow, StoreError, TriggerInsert, TriggerRow, new_id,
};

#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerInput {
    /// What happened, e.g. `export.ready`: rules match on it.
    #[serde(rename = "type")]
    pub trigger_type: String,
    /// The one user it happened to. Exactly one of `user_id`, `user_ids`
    /// and `topic`.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Up to 1,000 users (a repeated id gets one message): planned by the
    /// expander, the answer does not wait for it.
    #[serde(default)]
    pub user_ids: Option<Vec<String>>,
    /// Everyone subscribed to this topic when the trigger is recorded.
    #[serde(default)]
    pub topic: Option<String>,
    /// Who caused it: left out of the audience, and `actor` in templates.
    #[serde(default)]
    pub actor_id: Option<String>,
    /// RFC 3339: none of its messages is due before then (each rule's
    /// delay counts from it). At most a year ahead.
    #[serde(default)]
    pub send_at: Option<String>,
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
    /// `planned`, or `expanding` for a trigger to many: its messages are
    /// planned after the answer, `GET /v1/triggers/{id}` follows them.
    pub state: &'static str,
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

/// How far ahead `send_at` may be.
pub const SEND_AT_HORIZON: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

/// Most users one trigger may name in `user_ids`.
pub const MAX_USER_IDS: usize = 1_000;

/// A checked `POST /v1/triggers` body.
#[derive(Debug, Clone)]
pub enum Validated {
    /// To one user: recorded and planned in the request.
    One(NewTrigger),
    /// To many: recorded in the request, expanded after it.
    Many(NewFanOut),
}

impl Validated {
    pub fn request_hash(&self) -> Option<&str> {
        match self {
            Validated::One(t) => t.request_hash.as_deref(),
            Validated::Many(t) => t.request_hash.as_deref(),
        }
    }
}

/// Everything `POST /v1/triggers` checks before it touches the database,
/// reporting every field at fault at once. Public so the fuzz targets
/// ([`crate::tooling::fuzzing`]) run exactly the handler's checks, not a copy.
pub fn validate(input: &TriggerInput, now: Millis) -> Result<Validated, ApiError> {
    let mut errors = Vec::new();
    if let Err(e) = TriggerType::parse("type", &input.trigger_type) {
        errors.push(e.into());
    }
    let audience = audience(input, &mut errors);
    let actor_id = match &input.actor_id {
        None => None,
        Some(a) => UserId::parse("actor_id", a).map_err(|e| errors.push(e.into())).ok(),
    };
    let payload = input.payload.clone().unwrap_or_else(|| serde_json::json!({}));
    if !payload.is_object() {
        errors.push(FieldError::new("payload", "must be a JSON object"));
    }
    if let Some(k) = &input.idempotency_key
        && (k.is_empty() || k.len() > 255 || k.chars().any(char::is_control))
    {
        errors.push(FieldError::new("idempotency_key", "must be 1 to 255 characters without control characters"));
    }
    let occurred_at = occurred_at(input.occurred_at.as_deref(), now, &mut errors);
    let send_at = send_at(input.send_at.as_deref(), now, &mut errors);
    let (Some(audience), Some(occurred_at), Some(send_at), true) = (audience, occurred_at, send_at, errors.is_empty())
    else {
        return Err(ApiError::Invalid(errors));
    };
    // Hash of what the caller sent (a JSON object with sorted keys), so a
    // reused key with a different body is told apart from a replay. The
    // fields a single trigger had before triggers to many are hashed as
    // they were, so a replay across the upgrade is still a replay.
    let mut canonical = serde_json::json!({
        "type": input.trigger_type, "user_id": input.user_id, "payload": payload, "occurred_at": input.occurred_at,
    });
    for (field, value) in [
        ("user_ids", serde_json::to_value(&input.user_ids)),
        ("topic", serde_json::to_value(&input.topic)),
        ("actor_id", serde_json::to_value(&input.actor_id)),
        ("send_at", serde_json::to_value(&input.send_at)),
    ] {
        let value = value.expect("JSON values serialise");
        if !value.is_null() {
            canonical[field] = value;
        }
    }
    let request_hash = Some(hex::encode(Sha256::digest(canonical.to_string().as_bytes())));
    let (id, trigger_type, idempotency_key) = (new_id(), input.trigger_type.clone(), input.idempotency_key.clone());
    Ok(match audience {
        Whom::One(user_id) => Validated::One(NewTrigger {
            id,
            trigger_type,
            user_id,
            payload,
            idempotency_key,
            request_hash,
            occurred_at,
            send_at,
            actor_id,
        }),
        Whom::Many(audience) => Validated::Many(NewFanOut {
            id,
            trigger_type,
            audience,
            actor_id,
            payload,
            idempotency_key,
            request_hash,
            occurred_at,
            send_at,
        }),
    })
}

/// Whom a trigger is addressed to.
enum Whom {
    One(UserId),
    Many(Audience),
}

/// Exactly one of `user_id`, `user_ids` and `topic`, checked.
fn audience(input: &TriggerInput, errors: &mut Vec<FieldError>) -> Option<Whom> {
    match (&input.user_id, &input.user_ids, &input.topic) {
        (Some(user_id), None, None) => {
            UserId::parse("user_id", user_id).map_err(|e| errors.push(e.into())).ok().map(Whom::One)
        }
        (None, Some(ids), None) => {
            if ids.is_empty() || ids.len() > MAX_USER_IDS {
                let n = ids.len();
                errors.push(FieldError::new("user_ids", format!("must list 1 to {MAX_USER_IDS} user ids, not {n}")));
                return None;
            }
            let mut checked = Vec::with_capacity(ids.len());
            for (i, id) in ids.iter().enumerate() {
                match UserId::parse("user_ids", id) {
                    Ok(id) => checked.push(id),
                    Err(e) => errors.push(FieldError::new(format!("user_ids[{i}]"), e.to_string())),
                }
            }
            (checked.len() == ids.len()).then_some(Whom::Many(Audience::Users(checked)))
        }
        (None, None, Some(topic)) => TopicKey::parse("topic", topic)
            .map_err(|e| errors.push(e.into()))
            .ok()
            .map(|t| Whom::Many(Audience::Topic(t.as_str().to_owned()))),
        _ => {
            errors.push(FieldError::new(
                "user_id",
                "give exactly one of user_id (one user), user_ids (a list of 1 to 1,000) and topic (a topic's \
                 subscribers)",
            ));
            None
        }
    }
}

/// `occurred_at`, checked: now when absent, never more than
/// [`OCCURRED_AT_SKEW`] ahead.
fn occurred_at(input: Option<&str>, now: Millis, errors: &mut Vec<FieldError>) -> Option<Millis> {
    let latest = now.plus(OCCURRED_AT_SKEW);
    let Some(s) = input else { return Some(now) };
    match DateTime::parse_from_rfc3339(s) {
        Ok(t) if t.timestamp_millis() > latest.0 => {
            errors.push(FieldError::new(
                "occurred_at",
                format!(
                    "{s:?} is in the future: a trigger says when something happened, so occurred_at may be at most \
                     {} ahead of Herald's clock (now {now}); leave it out for now, and use send_at or the rule's \
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
    }
}

/// `send_at`, checked: an RFC 3339 time at most [`SEND_AT_HORIZON`]
/// ahead (one in the past sends now). `Some(None)` when absent.
fn send_at(input: Option<&str>, now: Millis, errors: &mut Vec<FieldError>) -> Option<Option<Millis>> {
    let Some(s) = input else { return Some(None) };
    match DateTime::parse_from_rfc3339(s) {
        Ok(t) if t.timestamp_millis() > now.plus(SEND_AT_HORIZON).0 => {
            errors.push(FieldError::new(
                "send_at",
                format!(
                    "{s:?} is more than a year ahead of Herald's clock (now {now}); send_at may be up to a year ahead"
                ),
            ));
            None
        }
        Ok(t) => Some(Some(Millis(t.timestamp_millis()))),
        Err(e) => {
            errors.push(FieldError::new(
                "send_at",
                format!("{s:?} is not an RFC 3339 time like \"2026-12-02T09:00:00+01:00\" ({e})"),
            ));
            None
        }
    }
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
    let trigger = match validate(&input, now)? {
        Validated::One(trigger) => trigger,
        Validated::Many(fan_out) => return create_many(&state, fan_out, now).await,
    };
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
            let body = TriggerAccepted { trigger_id: id, replayed: false, planned, digests, detail, state: "planned" };
            return Ok((StatusCode::ACCEPTED, ApiJson(body)));
        }
        Accepted::Existing(first) => first,
    };
    refuse_changed_replay(&first, request_hash.as_deref())?;
    let body = plan_and_describe(&state, &first, true).await?;
    Ok((StatusCode::ACCEPTED, ApiJson(body)))
}

/// A reused idempotency key with a different body is a 409, not a replay.
fn refuse_changed_replay(first: &TriggerRow, request_hash: Option<&str>) -> Result<(), ApiError> {
    if first.request_hash.as_deref() != request_hash {
        return Err(ApiError::Conflict(format!(
            "idempotency_key {:?} was already used for a different request (trigger {}); use a new key for a new event",
            first.idempotency_key.as_deref().unwrap_or_default(),
            first.id
        )));
    }
    Ok(())
}

/// A trigger to many: recorded, and the expander woken; the answer does
/// not wait for its audience.
async fn create_many(
    state: &AppState,
    fan_out: NewFanOut,
    now: Millis,
) -> Result<(StatusCode, ApiJson<TriggerAccepted>), ApiError> {
    let (id, request_hash) = (fan_out.id.clone(), fan_out.request_hash.clone());
    let body = match state.store.record_fan_out(&fan_out, now).await? {
        TriggerInsert::Created => {
            state.expander.wake();
            let detail = format!(
                "recorded; its audience is planned in chunks after this answer: GET /v1/triggers/{id} follows it"
            );
            TriggerAccepted {
                trigger_id: id,
                replayed: false,
                planned: Vec::new(),
                digests: Vec::new(),
                detail: Some(detail),
                state: "expanding",
            }
        }
        TriggerInsert::Existing(first) => {
            refuse_changed_replay(&first, request_hash.as_deref())?;
            let state_now = if first.planned_at.is_some() { "planned" } else { "expanding" };
            TriggerAccepted {
                trigger_id: first.id.clone(),
                replayed: true,
                planned: Vec::new(),
                digests: Vec::new(),
                detail: first.plan_detail.clone(),
                state: state_now,
            }
        }
    };
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
    Ok(TriggerAccepted {
        trigger_id: row.id.clone(),
        replayed,
        planned: planned(&rows),
        digests,
        detail,
        state: "planned",
    })
}
