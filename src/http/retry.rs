//! Requests that lost a race are tried again before they are answered.
//!
//! On Galera every node takes writes, and a transaction that touched a row
//! another node changed meanwhile fails its certification at commit (1213,
//! SQLSTATE 40001); PostgreSQL has serialization failures and deadlocks.
//! The transaction did nothing, and the same request again almost always
//! goes through, so answering 503 for it would hand the client a failure a
//! retry here resolves. Each store call already retries its own statement
//! (`store::race`); a request whose handler still ends with a lost race is
//! run again whole, a few times, with jitter, before its answer goes out.
//!
//! Only writes with a body of known, bounded size are replayed (the body is
//! kept to replay it); a lost race leaves nothing committed, so running the
//! handler again is safe. Triggers have their own retries and in-doubt
//! check (`intake`).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;

/// Marks a response whose request lost a race (set by `ApiError`).
#[derive(Debug, Clone, Copy)]
pub struct LostRace;

/// Runs of the whole request, the first included.
const RUNS: u32 = 4;

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    use tower::ServiceExt;

    use crate::http::problem::ApiError;
    use crate::store::StoreError;

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
