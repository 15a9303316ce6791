//! Errors as `application/problem+json` (RFC 9457): a status, a title, a
//! detail a person can act on, and for validation errors every field at fault.
//!
//! Internal errors are logged in full and answered with a generic detail:
//! database messages can carry table layouts and values that are not the
//! caller's business.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::planning::rule::FieldError;
use crate::store::StoreError;

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
            // `http::retry` runs the request again before answering this.
            resp.extensions_mut().insert(super::retry::LostRace);
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// axum's own rejections of a path or query in the same shape as every other
/// problem. (JSON bodies go through [`ApiJson`], which names the field.)
impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::Rejected { status: StatusCode::BAD_REQUEST, detail: r.body_text() }
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::Rejected { status: StatusCode::BAD_REQUEST, detail: r.body_text() }
    }
}

/// The JSON extractor, with rejections as problems.
///
/// A body that is not JSON at all is a `400` (with serde's line and
/// column, which is where the syntax broke). A body that is JSON of the wrong
/// shape (a required field missing, a number where text belongs, a field
/// Herald does not know) is a `422` naming the field in `errors`, exactly
/// like a value the handler refuses: to the caller both are "this field is
/// wrong", and one status with one shape is what a client can act on. axum's
/// own `Json` answers both with a single message carrying serde's position.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::Rejected {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                detail: "expected a JSON body with Content-Type: application/json".to_owned(),
            });
        }
        let body = axum::body::Bytes::from_request(req, state).await.map_err(|r| {
            let status = r.status();
            let detail = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "the request body is larger than the server accepts".to_owned()
            } else {
                r.body_text()
            };
            ApiError::Rejected { status, detail }
        })?;
        parse_json(&body).map(ApiJson)
    }
}

/// `application/json`, or any `application/*+json`, as axum's `Json` accepts.
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Parses a request body, turning serde's complaint into a problem that
/// names the field (see [`ApiJson`]).
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed: Result<T, ApiError> = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if !inner.is_data() {
            return ApiError::BadRequest(format!("the body is not valid JSON: {inner}"));
        }
        // serde's message ends with where in the text it was; the field
        // says that better.
        let full = inner.to_string();
        let position = format!(" at line {} column {}", inner.line(), inner.column());
        let message = full.strip_suffix(&position).unwrap_or(&full).to_owned();
        ApiError::Invalid(vec![FieldError::new(field_of(&path, &message), message)])
    });
    let value = parsed?;
    de.end().map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?;
    Ok(value)
}

/// The field a shape error is about: the path to it, and for a missing or
/// unknown field (reported at its parent) the field's own name.
fn field_of(path: &str, message: &str) -> String {
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match (path, named) {
        (".", Some(name)) => name.to_owned(),
        (".", None) => "body".to_owned(),
        (p, Some(name)) if !p.ends_with(name) => format!("{p}.{name}"),
        (p, _) => p.to_owned(),
    }
}

impl<T: Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        Json(self.0).into_response()
    }
}

/// The query extractor, with rejections as problems.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// The path extractor, with rejections as problems.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);
