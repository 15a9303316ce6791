//! The errors axum answers by itself, in the shape of every other error.
//!
//! A method a route does not take (`405`, with `Allow`) and a path outside
//! every router (`404`) come from axum with an empty body and no content
//! type, and a body the `Bytes` extractor cannot read (`413`) with a line of
//! `text/plain`: a client that reads `application/problem+json` for every
//! error got nothing to parse. They are rewritten here, once, around the
//! whole router (see [`super::router`]), rather than with a
//! `method_not_allowed_fallback` on each router: that applies only to the
//! routes registered before it is called, so the next route added after it
//! (or in a nested router) would answer bare again.
//!
//! Only errors without a body type, or `text/plain` ones under `/v1`, are
//! touched: the problems the handlers write, the screen's HTML pages and the
//! probes' plain text (`/readyz` answers `503` in words on purpose) pass as
//! they are.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::ApiError;

/// How much of a `text/plain` error body becomes the problem's `detail`:
/// axum's rejections are one line.
const MAX_DETAIL_BYTES: usize = 4096;

/// The middleware.
pub async fn as_problems(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let content_type = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    // RFC 9110 requires it on a 405; the new response keeps it.
    let allow = resp.headers().get(header::ALLOW).cloned();
    let api = path == "/v1" || path.starts_with("/v1/");
    let detail = match content_type {
        None => bare_detail(status, &method, &path, allow.as_ref()),
        Some(ct) if api && ct.starts_with("text/plain") => {
            let (_, body) = resp.into_parts();
            match axum::body::to_bytes(body, MAX_DETAIL_BYTES).await {
                Ok(text) if !text.is_empty() => String::from_utf8_lossy(&text).trim().to_owned(),
                _ => bare_detail(status, &method, &path, None),
            }
        }
        Some(_) => return resp,
    };
    if path == "/ui" || path.starts_with("/ui/") {
        return crate::http::ui::error_page(status, &detail);
    }
    let mut problem = ApiError::Rejected { status, detail }.into_response();
    if let Some(allow) = allow {
        problem.headers_mut().insert(header::ALLOW, allow);
    }
    problem
}

/// What went wrong, for a response axum sent without a body.
fn bare_detail(status: StatusCode, method: &axum::http::Method, path: &str, allow: Option<&HeaderValue>) -> String {
    match status {
        StatusCode::NOT_FOUND => {
            format!("no route for {method} {path}; the API is described at /v1/openapi.json")
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = allow.and_then(|v| v.to_str().ok()).unwrap_or_default();
            format!("{path} does not take {method}; it takes {allowed} (see /v1/openapi.json)")
        }
        other => other.canonical_reason().unwrap_or("error").to_owned(),
    }
}
