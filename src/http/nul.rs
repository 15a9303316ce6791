//! One check at the edge for every request: no U+0000 in the path, the
//! query or a submitted form.
//!
//! PostgreSQL's `text` cannot hold U+0000, so any id, cursor or filter that
//! carried `%00` into a query failed there with a 500 (`/v1/outbox?cursor=%00`,
//! `/v1/rules/%00`, `/ui/audit?before=%00`, the login form's email, and more;
//! SQLite and MariaDB simply found nothing). No value Herald accepts in a URL
//! or a form may contain it, so rather than a check in each of the dozens of
//! handlers (and the next one forgotten), this middleware answers 400 before
//! routing. JSON bodies are checked field by field where they are parsed,
//! since a payload may legitimately carry `\u0000` (stored as U+FFFD).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::ApiError;

/// Whether `%00` (or a raw NUL) is in `s` once percent-decoded.
fn has_nul(s: &str) -> bool {
    percent_encoding::percent_decode_str(s).any(|b| b == 0)
}

fn refuse(path: &str, what: &str) -> Response {
    let message = format!(
        "the request's {what} contains a NUL character (%00), which no id, cursor, filter or form value may hold"
    );
    if path == "/ui" || path.starts_with("/ui/") {
        crate::http::ui::error_page(StatusCode::BAD_REQUEST, &message)
    } else {
        ApiError::BadRequest(message).into_response()
    }
}

/// The middleware; `max_body_bytes` bounds how much of a form is read.
pub async fn reject_nul(max_body_bytes: usize, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if has_nul(&path) {
        return refuse(&path, "path");
    }
    if req.uri().query().is_some_and(has_nul) {
        return refuse(&path, "query string");
    }
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::Rejected {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                detail: format!("the form is larger than {max_body_bytes} bytes (http.max_body_bytes)"),
            }
            .into_response();
        }
    };
    if bytes.contains(&0) || percent_encoding::percent_decode(&bytes).any(|b| b == 0) {
        return refuse(&path, "form");
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

#[cfg(test)]
mod tests {
    use super::has_nul;

    #[test]
    fn finds_encoded_nul_only() {
        assert!(has_nul("/v1/rules/%00"));
        assert!(has_nul("cursor=a%00b"));
        assert!(!has_nul("/v1/rules/abc%2500"));
        assert!(!has_nul("cursor=a%20b"));
    }
}
