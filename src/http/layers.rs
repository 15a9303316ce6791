//! The layers around the routes, so `http/mod.rs` reads as the route table.
//!
//! A request meets them in this order, outermost first:
//! 1. [`as_problems`], around the whole router: axum's own bodiless errors
//!    (404, 405, 413) rewritten as problems.
//! 2. [`reject_nul`], before routing: no U+0000 in a path, a query or a
//!    form.
//! 3. The body limit (`http.max_body_bytes`, 413 beyond it), for every route.
//! 4. [`retry_lost_races`], around every `/v1` route: a write that lost a
//!    race is run again before it is answered.
//! 5. [`cors`], on the end users' inbox routes only (called from browsers).
//!
//! Authentication is not here: it is a route layer (`auth`, `user_auth`),
//! part of which routes take which credential, and so of the route table.

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use tower_http::cors::{AllowOrigin, CorsLayer};

use super::problem::ApiError;
use super::{AppState, Cors};

/// Wraps the finished router, as one service, in [`as_problems`]. Around
/// it rather than with `Router::layer`: that wraps each route's handlers
/// one by one, inside the code that adds a 405's `Allow`, so the problem
/// could not name the methods.
pub(super) fn problems(router: Router) -> Router {
    Router::new().fallback_service(router).layer(middleware::from_fn(as_problems))
}

/// The layers every route passes: the body limit, and outside it (before
/// routing, so every path and query, and the login form, which needs no
/// session, is checked once) [`reject_nul`].
pub(super) fn edge(routes: Router<AppState>, max_body_bytes: usize) -> Router<AppState> {
    routes
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn(move |req, next| reject_nul(max_body_bytes, req, next)))
}

/// The layer of every `/v1` route: [`retry_lost_races`].
pub(super) fn api(v1: Router<AppState>, max_body_bytes: usize) -> Router<AppState> {
    v1.layer(middleware::from_fn(move |req, next| retry_lost_races(max_body_bytes, req, next)))
}

// --- 1. Errors in the shape of every other error ---

/// How much of a `text/plain` error body becomes the problem's `detail`:
/// axum's rejections are one line.
const MAX_DETAIL_BYTES: usize = 4096;

/// The errors axum answers by itself, in the shape of every other error.
///
/// A method a route does not take (`405`, with `Allow`) and a path outside
/// every router (`404`) come from axum with an empty body and no content
/// type, and a body the `Bytes` extractor cannot read (`413`) with a line of
/// `text/plain`: a client that reads `application/problem+json` for every
/// error got nothing to parse. They are rewritten here, once, around the
/// whole router (see [`super::router`] and [`problems`]), rather than with a
/// `method_not_allowed_fallback` on each router: that applies only to the
/// routes registered before it is called, so the next route added after it
/// (or in a nested router) would answer bare again.
///
/// Only errors without a body type, or `text/plain` ones under `/v1`, are
/// touched: the problems the handlers write, the screen's HTML pages and the
/// probes' plain text (`/readyz` answers `503` in words on purpose) pass as
/// they are.
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

// --- 2. No NUL at the edge ---

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

/// One check at the edge for every request: no U+0000 in the path, the
/// query or a submitted form.
///
/// PostgreSQL's `text` cannot hold U+0000, so any id, cursor or filter that
/// carried `%00` into a query failed there with a 500 (`/v1/outbox?cursor=%00`,
/// `/v1/rules/%00`, `/ui/audit?before=%00`, the login form's email, and more;
/// SQLite and MariaDB simply found nothing). No value Herald accepts in a URL
/// or a form may contain it, so rather than a check in each of the dozens of
/// handlers (and the next one forgotten), this middleware answers 400 before
/// routing. JSON bodies are checked field by field where they are parsed,
/// since a payload may legitimately carry `\u0000` (stored as U+FFFD).
///
/// `max_body_bytes` bounds how much of a form is read.
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

// --- 4. Requests that lost a race ---

/// Marks a response whose request lost a race (set by `ApiError`).
#[derive(Debug, Clone, Copy)]
pub struct LostRace;

/// Runs of the whole request, the first included.
const RUNS: u32 = 4;

/// Requests that lost a race are tried again before they are answered.
///
/// On Galera every node takes writes, and a transaction that touched a row
/// another node changed meanwhile fails its certification at commit (1213,
/// SQLSTATE 40001); PostgreSQL has serialization failures and deadlocks.
/// The transaction did nothing, and the same request again almost always
/// goes through, so answering 503 for it would hand the client a failure a
/// retry here resolves. Each store call already retries its own statement
/// (`store::race`); a request whose handler still ends with a lost race is
/// run again whole, a few times, with jitter, before its answer goes out.
///
/// Only writes with a body of known, bounded size are replayed (the body is
/// kept to replay it); a lost race leaves nothing committed, so running the
/// handler again is safe. Triggers have their own retries and in-doubt
/// check (`intake`).
pub async fn retry_lost_races(max_body_bytes: usize, req: Request, next: Next) -> Response {
    let replayable = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
        && req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .is_some_and(|n| n <= max_body_bytes);
    if !replayable {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, max_body_bytes).await else {
        // Shorter or longer than it said: let the handler's own checks answer.
        return next.run(Request::from_parts(parts, Body::empty())).await;
    };
    let mut run = 1;
    loop {
        let again = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
        let response = next.clone().run(again).await;
        if response.extensions().get::<LostRace>().is_none() || run >= RUNS {
            return response;
        }
        crate::store::race::count("http request");
        tracing::debug!(path = %parts.uri.path(), run, "request lost a race; running it again");
        tokio::time::sleep(std::time::Duration::from_millis(rand::random_range(5..=50) * u64::from(run))).await;
        run += 1;
    }
}

// --- 5. The inbox from a browser ---

/// Who may call the end users' inbox routes from a browser ([`Cors`]):
/// the host application's pages, with the user's token and the stream's
/// `Last-Event-ID`.
pub(super) fn cors(cors: &Cors) -> CorsLayer {
    let origin = if cors.origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(cors.origins.iter().filter_map(|o| o.parse().ok()))
    };
    CorsLayer::new()
        .allow_origin(origin)
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, HeaderName::from_static("last-event-id")])
        .max_age(std::time::Duration::from_secs(600))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::has_nul;
    use crate::http::problem::ApiError;
    use crate::store::StoreError;

    #[test]
    fn finds_encoded_nul_only() {
        assert!(has_nul("/v1/rules/%00"));
        assert!(has_nul("cursor=a%00b"));
        assert!(!has_nul("/v1/rules/abc%2500"));
        assert!(!has_nul("cursor=a%20b"));
    }

    /// A handler that loses `losses` races before it succeeds, echoing the
    /// body it was given each time.
    fn app(losses: u32, runs: Arc<AtomicU32>) -> Router {
        Router::new()
            .route(
                "/w",
                post(move |body: String| async move {
                    if runs.fetch_add(1, Ordering::SeqCst) < losses {
                        return Err(ApiError::Store(StoreError::Injected { what: "1213", lost_race: true }));
                    }
                    Ok(body)
                }),
            )
            .layer(axum::middleware::from_fn(|req, next| super::retry_lost_races(1024, req, next)))
    }

    fn request(body: &'static str) -> axum::extract::Request {
        axum::http::Request::post("/w").header("content-length", body.len()).body(body.into()).unwrap()
    }

    #[tokio::test]
    async fn a_request_that_lost_a_race_is_run_again_with_its_body() {
        let runs = Arc::new(AtomicU32::new(0));
        let response = app(2, runs.clone()).oneshot(request("hello")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"hello");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn replays_are_bounded_and_the_last_answer_is_503() {
        let runs = Arc::new(AtomicU32::new(0));
        let response = app(100, runs.clone()).oneshot(request("x")).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(runs.load(Ordering::SeqCst), super::RUNS);
    }
}
