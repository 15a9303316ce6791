//! `/v1/bounces`: bounce and complaint messages in, evidence out.

use axum::body::Bytes;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::problem::{ApiError, ApiJson, ApiQuery, Problem};
use crate::ingest::{IngestError, IngestReport, ingest_mail};
use crate::store::BounceRow;

/// Raw messages can be large (some bounces attach the whole original).
pub const MAX_MAIL_BYTES: usize = crate::bounce::MAX_INPUT_BYTES;

/// Takes one raw message as received on the return path (for a mailbox
/// forwarder): records each recipient it reports on, appends `bounced` or
/// `complained` to the matched message's send log and suppresses hard-bounced
/// and complaining addresses. Sending the same message again changes nothing.
#[utoipa::path(post, path = "/v1/bounces/mail", tag = "bounces",
    request_body(content = String, content_type = "text/plain", description = "The raw message (any content type is accepted; message/rfc822 is the usual one)"),
    responses(
        (status = 200, body = IngestReport),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a message Herald can read", body = Problem, content_type = "application/problem+json"),
    ),
    security(("api_key" = [])))]
pub async fn mail(State(state): State<AppState>, body: Bytes) -> Result<ApiJson<IngestReport>, ApiError> {
    match ingest_mail(state.store.as_ref(), &state.keys, &body, "mail", state.clock.now()).await {
        Ok(report) => Ok(ApiJson(report)),
        Err(IngestError::Parse(e)) => Err(ApiError::field("body", e.to_string())),
        Err(IngestError::Store(e)) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct BounceQuery {
    /// 1 to 500 [default: 50]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BounceList {
    pub bounces: Vec<BounceRow>,
}

/// Recorded bounces and complaints, newest first.
#[utoipa::path(get, path = "/v1/bounces", tag = "bounces", params(BounceQuery),
    responses(
        (status = 200, body = BounceList),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("api_key" = [])))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<BounceQuery>,
) -> Result<ApiJson<BounceList>, ApiError> {
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::field("limit", "must be 1 to 500"));
    }
    Ok(ApiJson(BounceList { bounces: state.store.list_bounces(limit).await? }))
}
