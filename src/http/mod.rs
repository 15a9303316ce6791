//! The HTTP server: `/healthz`, `/readyz`, `/metrics`, the `/v1` JSON API,
//! and `/u/{token}`, the one-click unsubscribe page.
//!
//! Every `/v1` route but the OpenAPI document needs an API key; every error
//! is `application/problem+json` naming what was wrong; bodies are limited in
//! size.

pub mod auth;
mod openapi;
pub mod outbox;
pub mod problem;
pub mod rules;
pub mod suppressions;
pub mod triggers;
pub mod unsubscribe;
pub mod users;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::planner::Planner;
use crate::store::Store;
use problem::ApiError;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub metrics: Metrics,
    pub clock: Arc<dyn Clock>,
    pub planner: Planner,
    /// Address hashes and unsubscribe tokens.
    pub keys: crate::address::AddressKeys,
}

/// `max_body_bytes` bounds every request body (413 beyond it).
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    let v1 = Router::new()
        .route("/triggers", post(triggers::create))
        .route("/rules", post(rules::create).get(rules::list))
        .route("/rules/{id}", get(rules::get).patch(rules::update).delete(rules::delete))
        .route("/rules/{id}/preview", get(rules::preview))
        .route("/users/{user_id}", get(users::get).put(users::put).delete(users::delete))
        .route("/users/{user_id}/sends", get(users::sends))
        .route("/outbox", get(outbox::list))
        .route("/outbox/{id}/retry", post(outbox::retry))
        .route("/outbox/{id}/cancel", post(outbox::cancel))
        .route("/suppressions", get(suppressions::list).post(suppressions::create).delete(suppressions::delete))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_api_key))
        // Public: tooling fetches the document before it has a key.
        .route("/openapi.json", get(openapi_json))
        .fallback(not_found);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        // Public, by design: the signed token is the credential (RFC 8058).
        .route("/u/{token}", get(unsubscribe::show).post(unsubscribe::unsubscribe))
        .nest("/v1", v1)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route; the API is described at /v1/openapi.json".into())
}

async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(openapi::document())
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
