//! Errors as `application/problem+json` (RFC 9457): a status, a title, a
//! detail a person can act on, and for validation errors every field at fault.
//!
//! Internal errors are logged in full and answered with a generic detail:
//! database messages can carry table layouts and values that are not the
//! caller's business.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::planning::rule::FieldError;
use crate::store::StoreError;

// The extractors live in their own module; handlers name them from here.
pub use super::extract::{ApiJson, ApiPath, ApiQuery, parse_json};

/// The body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem (`about:blank` when the status says it all).
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// For 422: every field that was refused, with line and column for
    /// templates; for a 400 about a header, the header.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// A request header Herald reads (`Last-Event-ID`) holds a value it
    /// does not accept: a `400` whose `errors` name the header.
    #[error("invalid header: {header}")]
    BadHeader { header: &'static str, message: String },
    #[error("{detail}")]
    Unauthorized { detail: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("the request has {} invalid field(s)", .0.len())]
    Invalid(Vec<FieldError>),
    #[error("{detail}")]
    Rejected { status: StatusCode, detail: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ApiError {
    pub fn field(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::Invalid(vec![FieldError::new(field, message)])
    }

    /// A list endpoint's `limit`: `default` when absent, refused (naming the
    /// accepted range) outside `1..=max`.
    pub fn page_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
        let limit = limit.unwrap_or(default);
        if (1..=max).contains(&limit) {
            Ok(limit)
        } else {
            Err(ApiError::field("limit", format!("must be 1 to {max}")))
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::BadHeader { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Rejected { status, .. } => *status,
            // The database is away or kept losing races: nothing was
            // recorded (see `intake`), and the same request later will go
            // through. 503 says "try again", 500 would say "this is broken".
            ApiError::Store(e) if e.is_unavailable() || e.is_lost_race() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let lost_race = matches!(&self, ApiError::Store(e) if e.is_lost_race());
        let (detail, errors) = match self {
            ApiError::Store(e) if status == StatusCode::SERVICE_UNAVAILABLE => {
                tracing::warn!(error = %e, "request not completed: the database is unavailable");
                (
                    "the database is unavailable or busy; send the request again (a trigger with the same \
                     idempotency_key is recorded once)"
                        .to_owned(),
                    vec![],
                )
            }
            ApiError::Store(e) => {
                tracing::error!(error = %e, "request failed on the database");
                ("the request could not be completed because of a database error; it was logged".to_owned(), vec![])
            }
            ApiError::Invalid(errors) => {
                let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
                (format!("invalid field(s): {}", fields.join(", ")), errors)
            }
            ApiError::BadHeader { header, message } => {
                (format!("invalid header {header}: {message}"), vec![FieldError::new(header, message)])
            }
            other => (other.to_string(), vec![]),
        };
        let problem = Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail,
            errors,
        };
        let mut resp = (status, Json(problem)).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if lost_race {
            // `http::layers::retry_lost_races` runs the request again before answering this.
            resp.extensions_mut().insert(super::layers::LostRace);
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// axum's own rejection of a path in the same shape as every other
/// problem. (Bodies and queries go through [`ApiJson`] and [`ApiQuery`],
/// which name the field.)
impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::Rejected { status: StatusCode::BAD_REQUEST, detail: r.body_text() }
    }
}
