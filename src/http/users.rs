//! `/v1/users/{user_id}`: recipients, and the answer to "did they get it".

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::Serialize;

use super::AppState;
use super::problem::{ApiError, ApiJson, ApiPath};
use super::responses::{BadRequest, Invalid, NotFound, NotJson, TooLarge, Unauthorized};
use crate::domain::UserId;
use crate::planning::recipient::{RecipientInput, RecipientView};
use crate::store::{SendRecord, UserErasure};

/// The `user_id` of a path, parsed (a `422` naming it when refused).
pub(super) fn user(id: &str) -> Result<UserId, ApiError> {
    UserId::parse("user_id", id).map_err(|e| ApiError::Invalid(vec![e.into()]))
}

/// Creates or replaces a recipient.
#[utoipa::path(put, path = "/v1/users/{user_id}", tag = "users", params(("user_id" = String, Path)),
    request_body = RecipientInput,
    responses(
        (status = 200, description = "Replaced", body = RecipientView),
        (status = 201, description = "Created", body = RecipientView),
        BadRequest, Unauthorized, TooLarge, NotJson, Invalid,
    ),
    security(("api_key" = [])))]
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<super::auth::Caller>,
    ApiPath(user_id): ApiPath<String>,
    ApiJson(input): ApiJson<RecipientInput>,
) -> Result<(StatusCode, ApiJson<RecipientView>), ApiError> {
    let user = user(&user_id)?;
    let (view, created) = put_recipient(&state, &user, input, &caller.audit_name()).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, ApiJson(view)))
}

/// Validates and stores a recipient, keeping the user's own choices and the
/// creation time of an existing one, and records a change of the host's
/// preferences in the audit trail as `who`. The API's PUT and `herald users
/// set` both come through here. `true` when the user is new.
pub async fn put_recipient(
    state: &AppState,
    user: &UserId,
    input: RecipientInput,
    who: &str,
) -> Result<(RecipientView, bool), ApiError> {
    let now = state.clock.now();
    let mut row = input.into_row(user, now).map_err(ApiError::Invalid)?;
    // Stored E.164, hashed as a STOP or a search by phone will hash it.
    row.phone_hash = row.phone.as_deref().map(|p| state.keys.hash_normalized(p));
    let existing = state.store.get_recipient(user).await?;
    let before = existing.as_ref().map(|e| e.preferences.clone()).unwrap_or_else(|| serde_json::json!({}));
    if let Some(existing) = existing {
        row.created_at = existing.created_at;
        // The user's own choices are not the host's to replace.
        row.user_choices = existing.user_choices;
    }
    let created = state.store.put_recipient(&row).await?;
    let empty = |v: &serde_json::Value| {
        serde_json::from_value::<crate::planning::recipient::Preferences>(v.clone()).unwrap_or_default()
            == crate::planning::recipient::Preferences::default()
    };
    if before != row.preferences && !(empty(&before) && empty(&row.preferences)) {
        let detail = format!("host preferences set to {}", row.preferences);
        super::preferences::audit_preferences(state, who, user, detail).await;
    }
    Ok((RecipientView::from(&row), created))
}

#[utoipa::path(get, path = "/v1/users/{user_id}", tag = "users", params(("user_id" = String, Path)),
    responses((status = 200, body = RecipientView), Unauthorized, NotFound, Invalid),
    security(("api_key" = [])))]
pub async fn get(
    State(state): State<AppState>,
    ApiPath(user_id): ApiPath<String>,
) -> Result<ApiJson<RecipientView>, ApiError> {
    let user = user(&user_id)?;
    let row =
        state.store.get_recipient(&user).await?.ok_or_else(|| ApiError::NotFound(format!("no user {user_id:?}")))?;
    Ok(ApiJson(RecipientView::from(&row)))
}

/// Erases the user's address, preferences and inbox, and cancels what is
/// still scheduled for them ("user deleted"). The send log keeps its rows,
/// which hold only an address hash.
#[utoipa::path(delete, path = "/v1/users/{user_id}", tag = "users", params(("user_id" = String, Path)),
    responses((status = 200, body = UserErasure), Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    ApiPath(user_id): ApiPath<String>,
) -> Result<ApiJson<UserErasure>, ApiError> {
    let user = user(&user_id)?;
    let erased = state.store.erase_user(&user, state.clock.now()).await?;
    tracing::info!(user = %user, ?erased, "user erased");
    Ok(ApiJson(erased))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SendEvent {
    /// sent, failed, suppressed, bounced, expired, cancelled, complained;
    /// and for a text, what the carrier reported after Herald handed it
    /// over: delivered, or undelivered (the message's own status stays
    /// sent)
    pub status: String,
    pub detail: Option<String>,
    pub transport: Option<String>,
    /// The provider's id for the message (the email's Message-ID, Twilio's
    /// sid, Slack's ts, a push service's id), to find it in its console.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    pub attempts: i64,
    pub at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageHistory {
    pub outbox_id: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub channel: String,
    /// What the message is about (see the outbox list's `subject`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The outbox row's status now.
    pub status: String,
    pub due_at: String,
    pub attempts: i64,
    /// The last error, for a row still waiting to be retried; the outcome's
    /// detail for a finished one; for a held row, why it is held.
    pub detail: Option<String>,
    /// For a row a send window, quiet hours or an escalation's wait holds:
    /// when it falls due again (RFC 3339). `detail` says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<String>,
    pub created_at: String,
    /// Send-log rows for this message, oldest first.
    pub history: Vec<SendEvent>,
    /// For a digest message: the triggers folded into it, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest_triggers: Option<Vec<String>>,
    /// For an escalation follow-up: the inbox message (outbox id) it
    /// follows up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up_of: Option<String>,
    /// For an escalation follow-up: which step of its rule's escalation it
    /// is, from 1 (a single follow-up is step 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up_step: Option<usize>,
    /// For an inbox message of an escalating rule: its FIRST follow-up's
    /// outbox id (the only one, before chains). `follow_ups` lists every
    /// step's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up: Option<String>,
    /// For an inbox message of an escalating rule: every planned
    /// follow-up's outbox id, in step order (a chain plans them all when
    /// its first step falls due).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub follow_ups: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QuietTrigger {
    pub trigger_id: String,
    #[serde(rename = "type")]
    pub trigger_type: String,
    pub occurred_at: String,
    /// Why nothing was planned ("no enabled rule matches …", "condition … is
    /// false"), or that it is still waiting for the planner.
    pub detail: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UserSends {
    pub user_id: String,
    /// Every message planned for the user, newest first.
    pub messages: Vec<MessageHistory>,
    /// Triggers for the user that planned no message, newest first.
    pub triggers_without_messages: Vec<QuietTrigger>,
}

fn event(s: &SendRecord) -> SendEvent {
    SendEvent {
        status: s.status.clone(),
        detail: s.detail.clone(),
        transport: s.transport.clone(),
        provider_id: s.provider_id.clone(),
        attempts: s.attempts,
        at: s.created_at.to_rfc3339(),
    }
}

/// Did the user get it, and if not, why: every message with its status and
/// history, and the triggers that planned nothing.
#[utoipa::path(get, path = "/v1/users/{user_id}/sends", tag = "users", params(("user_id" = String, Path)),
    responses((status = 200, body = UserSends), Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn sends(
    State(state): State<AppState>,
    ApiPath(user_id): ApiPath<String>,
) -> Result<ApiJson<UserSends>, ApiError> {
    let user = user(&user_id)?;
    Ok(ApiJson(timeline(&state, &user).await?))
}

/// The answer to "did they get it, and if not, why" for one user: every
/// message with its history, and the triggers that planned nothing. The API
/// and the operator screen's send-log page both show this.
pub async fn timeline(state: &AppState, user: &UserId) -> Result<UserSends, ApiError> {
    user_timeline(&*state.store, user, 200).await
}

/// [`timeline`] on a store, for the command line (`herald sends --user-id`),
/// which has no server state: the same answer as the API's, at most `limit`
/// messages and triggers.
pub async fn user_timeline(store: &dyn crate::store::Store, user: &UserId, limit: u32) -> Result<UserSends, ApiError> {
    let user_id = user.as_str().to_owned();
    // In one snapshot: read apart, a row could be read before a worker's
    // commit and its log after it (`scheduled` with `sent` in its history).
    let crate::store::UserHistory { rows, log, triggers } = store.user_history(user, limit).await?;
    let mut subjects = crate::headline::subjects(store, &rows).await?;
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let mut digests: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    for item in store.digest_items(&ids).await? {
        digests.entry(item.outbox_id).or_default().push(item.trigger_id);
    }
    // Original -> its follow-ups as (step, outbox id), in step order.
    let mut follow_ups: std::collections::HashMap<String, Vec<(usize, String)>> = std::collections::HashMap::new();
    for r in &rows {
        if let Some((original, step)) = crate::planning::workflow::follow_up_step(&r.dedupe_key) {
            follow_ups.entry(original.to_owned()).or_default().push((step, r.id.clone()));
        }
    }
    for steps in follow_ups.values_mut() {
        steps.sort();
    }
    let mut messages = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut history: Vec<SendEvent> = log.iter().filter(|s| s.outbox_id == r.id).map(event).collect();
        history.reverse(); // the log reads newest first; a history reads oldest first
        let steps = follow_ups.remove(&r.id).unwrap_or_default();
        messages.push(MessageHistory {
            outbox_id: r.id.clone(),
            rule_id: r.rule_id.clone(),
            trigger_id: r.trigger_id.clone(),
            channel: r.channel.clone(),
            subject: subjects.remove(&r.id),
            status: r.status.to_string(),
            due_at: r.due_at.to_rfc3339(),
            attempts: r.attempts,
            detail: r.last_error.clone(),
            held_until: r.hold_detail().map(|_| r.due_at.to_rfc3339()),
            created_at: r.created_at.to_rfc3339(),
            history,
            digest_triggers: digests.remove(&r.id),
            follow_up_of: crate::planning::workflow::follow_up_of(&r.dedupe_key).map(str::to_owned),
            follow_up_step: crate::planning::workflow::follow_up_step(&r.dedupe_key).map(|(_, n)| n),
            follow_up: steps.iter().find(|(n, _)| *n == 1).map(|(_, id)| id.clone()),
            follow_ups: steps.into_iter().map(|(_, id)| id).collect(),
        });
    }
    let quiet = triggers
        .iter()
        .filter(|t| t.planned_count.unwrap_or(0) == 0)
        .map(|t| QuietTrigger {
            trigger_id: t.id.clone(),
            trigger_type: t.trigger_type.clone(),
            occurred_at: t.occurred_at.to_rfc3339(),
            detail: match (&t.planned_at, &t.plan_detail) {
                (None, _) => "not planned yet: waiting for the planner".to_owned(),
                (Some(_), Some(d)) => d.clone(),
                (Some(_), None) => "planned nothing".to_owned(),
            },
        })
        .collect();
    Ok(UserSends { user_id, messages, triggers_without_messages: quiet })
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UserToken {
    /// For `Authorization: Bearer` on the /v1/inbox routes.
    pub token: String,
    pub expires_at: String,
}

/// Issues a short-lived token that lets one user read and change their own
/// inbox (from a browser or an app). Host backends can also compute it
/// themselves with the shared secret (see the README).
#[utoipa::path(post, path = "/v1/users/{user_id}/token", tag = "users", params(("user_id" = String, Path)),
    responses((status = 200, body = UserToken), Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn token(
    State(state): State<AppState>,
    ApiPath(user_id): ApiPath<String>,
) -> Result<ApiJson<UserToken>, ApiError> {
    let user = user(&user_id)?;
    let expires_at = state.clock.now().plus(state.token_ttl);
    Ok(ApiJson(UserToken { token: state.user_tokens.issue(&user, expires_at), expires_at: expires_at.to_rfc3339() }))
}
