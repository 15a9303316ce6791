//! `/v1/outbox`: the rows themselves, for operators and scripts.

use axum::extract::{Extension, State};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Caller;
use super::problem::{ApiError, ApiJson, ApiPath, ApiQuery};
use super::responses::{BadRequest, Conflict, Invalid, NotFound, Unauthorized};
use crate::domain::OutboxStatus;
use crate::store::{OutboxFilter, OutboxRow, RowAction};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct OutboxQuery {
    /// scheduled, sending, sent, failed, suppressed, expired or cancelled
    pub status: Option<String>,
    pub user_id: Option<String>,
    pub rule_id: Option<String>,
    /// `next_cursor` from the previous page
    #[param(value_type = Option<String>, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub cursor: Option<super::cursor::Cursor>,
    /// 1 to 500 [default: 50]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OutboxItem {
    pub id: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub user_id: String,
    pub channel: String,
    /// What the message is about: its rule's subject rendered for the
    /// recipient (with the rule as it is now), or a hand-enqueued payload's
    /// `subject`/`title`. Absent when there is none. Lists only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub status: String,
    pub due_at: String,
    pub expires_at: Option<String>,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl OutboxItem {
    /// Items for a list, each with its subject (see [`crate::headline`]).
    pub async fn list(store: &dyn crate::store::Store, rows: &[OutboxRow]) -> Result<Vec<OutboxItem>, ApiError> {
        let mut subjects = crate::headline::subjects(store, rows).await?;
        Ok(rows.iter().map(|r| OutboxItem { subject: subjects.remove(&r.id), ..OutboxItem::from(r) }).collect())
    }
}

impl From<&OutboxRow> for OutboxItem {
    fn from(r: &OutboxRow) -> Self {
        OutboxItem {
            id: r.id.clone(),
            rule_id: r.rule_id.clone(),
            trigger_id: r.trigger_id.clone(),
            user_id: r.user_id.clone(),
            channel: r.channel.clone(),
            subject: None,
            status: r.status.to_string(),
            due_at: r.due_at.to_rfc3339(),
            expires_at: r.expires_at.map(|t| t.to_rfc3339()),
            attempts: r.attempts,
            last_error: r.last_error.clone(),
            created_at: r.created_at.to_rfc3339(),
            updated_at: r.updated_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OutboxPage {
    /// Newest first.
    pub items: Vec<OutboxItem>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Lists outbox rows, newest first, filtered and paginated.
#[utoipa::path(get, path = "/v1/outbox", tag = "outbox", params(OutboxQuery),
    responses((status = 200, body = OutboxPage), BadRequest, Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<OutboxQuery>,
) -> Result<ApiJson<OutboxPage>, ApiError> {
    let status = match &q.status {
        None => None,
        Some(s) => Some(s.parse::<OutboxStatus>().map_err(|e| ApiError::Invalid(vec![e.into()]))?),
    };
    let limit = ApiError::page_limit(q.limit, 50, 500)?;
    let filter = OutboxFilter {
        status,
        user_id: q.user_id,
        rule_id: q.rule_id,
        before: q.cursor.map(super::cursor::Cursor::into_string),
        limit,
    };
    let rows = state.store.list_outbox(&filter).await?;
    let next_cursor = super::cursor::next_key(&rows, limit, |r| &r.id);
    Ok(ApiJson(OutboxPage { items: OutboxItem::list(&*state.store, &rows).await?, next_cursor }))
}

pub fn answer(id: &str, action: RowAction, verb: &str) -> Result<ApiJson<OutboxItem>, ApiError> {
    match action {
        RowAction::Done(row) => Ok(ApiJson(OutboxItem::from(row.as_ref()))),
        RowAction::NotFound => Err(ApiError::NotFound(format!("no outbox row with id {id:?}"))),
        RowAction::Refused(row) => Err(ApiError::Conflict(format!(
            "cannot {verb} outbox row {id}: it is {}{}",
            row.status,
            match row.status {
                OutboxStatus::Sent => " (retrying would deliver it twice)",
                OutboxStatus::Sending => " (a worker is delivering it right now)",
                _ => " (only scheduled rows can be cancelled)",
            }
        ))),
    }
}

/// Schedules a row again, due now, attempts and expiry reset. Refused for
/// `sent` and `sending` rows.
#[utoipa::path(post, path = "/v1/outbox/{id}/retry", tag = "outbox", params(("id" = String, Path)),
    responses((status = 200, body = OutboxItem), Unauthorized, NotFound, Conflict),
    security(("api_key" = [])))]
pub async fn retry(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<ApiJson<OutboxItem>, ApiError> {
    let action = state.store.retry_outbox(&id, state.clock.now()).await?;
    tracing::info!(outbox = %id, key = %caller.key_name, "retry requested");
    let answered = answer(&id, action, "retry")?;
    super::audit_api(&state, &caller, "outbox.retry", &id, Some("scheduled again, due now".into())).await;
    Ok(answered)
}

/// Cancels a scheduled row; the send log says who cancelled it.
#[utoipa::path(post, path = "/v1/outbox/{id}/cancel", tag = "outbox", params(("id" = String, Path)),
    responses((status = 200, body = OutboxItem), Unauthorized, NotFound, Conflict),
    security(("api_key" = [])))]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<ApiJson<OutboxItem>, ApiError> {
    let detail = format!("cancelled through the API by key \"{}\"", caller.key_name);
    let action = state.store.cancel_outbox(&id, &detail, state.clock.now()).await?;
    let answered = answer(&id, action, "cancel")?;
    super::audit_api(&state, &caller, "outbox.cancel", &id, None).await;
    Ok(answered)
}
