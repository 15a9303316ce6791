//! The HTTP server: health, readiness and metrics for now; the `/v1` API
//! joins it here.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::store::Store;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub metrics: Metrics,
    pub clock: Arc<dyn Clock>,
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// The process is up. Says nothing about the database, on purpose: a
/// liveness probe that fails when the database is away gets every instance
/// restarted at once, which helps nobody.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready to do work: the database answers.
async fn readyz(State(state): State<AppState>) -> Response {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: database unreachable: {e}\n")).into_response()
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    // The outbox depth is read now; if the database is away the other
    // metrics are still worth serving.
    match state.store.status_summary(state.clock.now()).await {
        Ok(summary) => state.metrics.set_outbox(&summary),
        Err(e) => tracing::warn!(error = %e, "metrics: could not read outbox depth"),
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
        .into_response()
}
