//! The HTTP server: `/healthz`, `/readyz`, `/metrics`, the `/v1` JSON API,
//! `/u/{token}`, the one-click unsubscribe page, and the operator screen
//! under `/ui` (see [`ui`]).
//!
//! Every `/v1` route but the OpenAPI document needs an API key; every error
//! is `application/problem+json` naming what was wrong; bodies are limited in
//! size.

pub mod access;
pub mod auth;
pub mod bounces;
pub mod credential;
pub mod cursor;
pub mod events;
pub mod extract;
pub mod inbox;
pub mod layers;
mod openapi;
pub mod outbox;
pub mod preference_form;
pub mod preferences;
pub mod problem;
pub mod push;
pub mod push_subscriptions;
pub mod responses;
pub mod resume;
pub mod rules;
pub mod server;
pub mod sms;
pub mod suppressions;
pub mod topics;
pub mod trigger_report;
pub mod triggers;
pub mod ui;
pub mod unsubscribe;
pub mod user_auth;
pub mod users;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router, middleware};

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::planning::planner::Planner;
use crate::store::Store;
use problem::ApiError;

/// What every handler shares. axum clones the state for each request at
/// each layer that extracts it (the handler, the auth and metrics
/// middleware), so it is one `Arc`: cloning the parts themselves (the
/// configuration's strings, key sets, policies) was 4% of the process's CPU
/// in `herald bench --pipeline`.
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The services and settings behind [`AppState`].
pub struct AppParts {
    pub store: Arc<dyn Store>,
    pub metrics: Metrics,
    pub clock: Arc<dyn Clock>,
    pub planner: Planner,
    /// Expands triggers to many (woken when one is recorded here).
    pub expander: crate::planning::fan_out::Expander,
    /// Records and plans `POST /v1/triggers` in shared transactions.
    pub intake: crate::planning::intake::Intake,
    /// API keys looked up recently.
    pub api_keys: auth::KeyCache,
    /// Address hashes and unsubscribe tokens.
    pub keys: crate::address::AddressKeys,
    /// When soft bounces suppress an address.
    pub soft_bounces: crate::feedback::ingest::SoftBouncePolicy,
    /// Provider webhook credentials (SendGrid, Mailgun, Postmark).
    pub providers: bounces::ProviderKeys,
    /// What webhook URLs rules may name.
    pub webhooks: crate::delivery::channel::webhook::WebhookPolicy,
    /// Which channels this instance's configuration lets deliver: a rule
    /// cannot be turned on for one that cannot.
    pub channels: crate::delivery::channel::catalog::Channels,
    /// Signs and checks the end users' inbox tokens.
    pub user_tokens: user_auth::TokenKey,
    pub token_ttl: std::time::Duration,
    /// The zone send windows and quiet hours are read in for a recipient
    /// without one (`worker.default_timezone`): the rule preview's.
    pub default_timezone: chrono_tz::Tz,
    /// The operator screen's session and login settings.
    pub ui: crate::config::UiSettings,
    /// The operator logins' password checks (`ui.login_concurrency`).
    pub login_checks: Arc<crate::http::ui::session::PasswordChecks>,
    /// The Web Push public key (`push.vapid_private_key`'s), served to
    /// pages that subscribe; `None` when Web Push is off.
    pub vapid_public_key: Option<String>,
    /// Credentials providers refused, for `/readyz`; shared with the
    /// channels of this process's worker.
    pub health: crate::delivery::health::ChannelHealth,
    /// Which Web Push endpoints a registration may name
    /// (`push.allow_private_networks`).
    pub push_endpoints: crate::delivery::channel::push::webpush::EndpointPolicy,
    /// Cancelled on shutdown: long-lived responses (the inbox stream) end
    /// themselves, or a graceful shutdown would wait for them forever.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// What SMS callbacks are checked with (`[sms]`, `http.public_url`);
    /// `None` without an SMS transport.
    pub sms: Option<Arc<sms::SmsHooks>>,
    /// `sms.max_segments`: an SMS rule whose text is longer is refused.
    pub sms_max_segments: usize,
}

/// Who may call the end-user inbox API from a browser.
#[derive(Debug, Clone, Default)]
pub struct Cors {
    /// Exact origins (`https://app.example.com`); `*` allows any.
    pub origins: Vec<String>,
}

/// `max_body_bytes` bounds every request body (413 beyond it). The layers
/// around the routes, and the order a request meets them in, are in
/// [`layers`].
pub fn router(state: AppState, max_body_bytes: usize, cors: &Cors) -> Router {
    layers::problems(routes(state, max_body_bytes, cors))
}

fn routes(state: AppState, max_body_bytes: usize, cors: &Cors) -> Router {
    let inbox = Router::new()
        .route("/", get(inbox::list))
        .route("/count", get(inbox::count))
        .route("/stream", get(inbox::stream))
        .route("/read-all", post(inbox::read_all))
        .route("/{id}/seen", post(inbox::seen))
        .route("/{id}/read", post(inbox::read))
        .route("/{id}/unread", post(inbox::unread))
        .route("/{id}/archive", post(inbox::archive))
        .route("/preferences", get(preferences::get).put(preferences::put))
        .route("/push-subscriptions", post(push_subscriptions::inbox_create).get(push_subscriptions::inbox_index))
        .route("/push-subscriptions/{id}", delete(push_subscriptions::inbox_delete))
        .route_layer(middleware::from_fn_with_state(state.clone(), user_auth::require_user_token))
        // Inside the CORS layer: a page that calls an inbox route this
        // server does not have (an older Herald) reads the 404 and its
        // detail, instead of a CORS failure that says nothing.
        .fallback(not_found)
        .layer(layers::cors(cors));
    let v1 = Router::new()
        .route("/triggers", post(triggers::create))
        .route("/triggers/{id}", get(trigger_report::get))
        .route("/triggers/{id}/cancel", post(trigger_report::cancel))
        .route("/rules", post(rules::create).get(rules::list))
        .route("/rules/{id}", get(rules::get).patch(rules::update).delete(rules::delete))
        .route("/rules/{id}/preview", get(rules::preview))
        .route("/users/{user_id}", get(users::get).put(users::put).delete(users::delete))
        .route("/users/{user_id}/sends", get(users::sends))
        .route("/users/{user_id}/token", post(users::token))
        .route("/users/{user_id}/push-subscriptions", post(push_subscriptions::create).get(push_subscriptions::index))
        .route("/users/{user_id}/push-subscriptions/{id}", delete(push_subscriptions::delete))
        .route("/events/stream", get(events::stream))
        .route("/bounces", get(bounces::list))
        .route("/bounces/mail", post(bounces::mail).layer(DefaultBodyLimit::max(bounces::MAX_MAIL_BYTES)))
        .route("/outbox", get(outbox::list))
        .route("/outbox/{id}/retry", post(outbox::retry))
        .route("/outbox/{id}/cancel", post(outbox::cancel))
        .route("/suppressions", get(suppressions::list).post(suppressions::create).delete(suppressions::delete))
        .route("/topics", get(topics::list))
        .route("/topics/{key}", get(topics::get).put(topics::put).delete(topics::delete))
        .route(
            "/topics/{key}/subscribers",
            get(topics::subscribers)
                .post(topics::subscribe)
                .delete(topics::unsubscribe)
                .layer(DefaultBodyLimit::max(topics::MAX_SUBSCRIBERS_BYTES)),
        )
        .route("/users/{user_id}/topics", get(topics::user_topics))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_api_key))
        // Added after the API-key layer: the inbox routes take user tokens,
        // and the providers' bounce webhooks carry their own signatures.
        .nest("/inbox", inbox)
        .route("/bounces/sendgrid", post(bounces::sendgrid))
        .route("/bounces/mailgun", post(bounces::mailgun))
        .route("/bounces/postmark", post(bounces::postmark))
        .route("/bounces/ses", post(bounces::ses))
        // Each proves itself: Twilio's signature, Kannel's signed token.
        .route("/sms/status/twilio", post(sms::twilio_status))
        .route("/sms/status/kannel", get(sms::kannel_status))
        .route("/sms/inbound/twilio", post(sms::twilio_inbound))
        .route("/sms/inbound/kannel", get(sms::kannel_inbound))
        // Public: tooling fetches the document before it has a key.
        .route("/openapi.json", get(openapi_json))
        // Public: a page asks for it before it holds any credential.
        .route("/push/vapid-public-key", get(push::vapid_public_key))
        .fallback(not_found);
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/widget/inbox.js", get(widget_js))
        .route("/widget/push-sw.js", get(push_sw_js))
        // Public, by design: the signed token is the credential (RFC 8058).
        .route("/u/{token}", get(unsubscribe::show).post(unsubscribe::unsubscribe))
        .route("/p/{token}", get(preferences::show).post(preferences::save))
        .nest("/v1", layers::api(v1, max_body_bytes))
        // Outside the API-key layer: the screen has its own operator login.
        .nest("/ui", crate::http::ui::router(state.clone()))
        .route("/ui/", get(|| async { axum::response::Redirect::to("/ui/rules") }))
        // A browser pointed at the server's root lands on the screen (its
        // login), not on a blank 404.
        .route("/", get(|| async { axum::response::Redirect::to("/ui") }));
    layers::edge(routes, max_body_bytes).with_state(state)
}

/// Records a change made through the API in the operator screen's audit
/// log, as the screen records its own, with the API key's name as who did
/// it (`api key "billing-service"`). Written after the change commits, like
/// the screen's; a failure to write it is logged, not answered.
pub async fn audit_api(state: &AppState, caller: &auth::Caller, action: &str, target: &str, detail: Option<String>) {
    let entry = crate::store::AuditEntry {
        operator_email: caller.audit_name(),
        action: action.into(),
        target: target.into(),
        detail,
    };
    if let Err(e) = state.store.append_audit(&entry, state.clock.now()).await {
        tracing::error!(error = %e, key = %caller.key_name, action, target, "could not write the audit log");
    }
}

/// The embeddable inbox widget: one script tag on a host page.
async fn widget_js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
            // Host pages on any origin load it with a plain <script> tag.
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        include_str!("../../widget/inbox.js"),
    )
}

/// The push service worker, for a host to copy to its own origin (a
/// service worker must be same-origin with the pages it serves, so it
/// cannot be loaded from here); served so the current version is one
/// download away, and so the widget's docs can point at it.
async fn push_sw_js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        include_str!("../../widget/push-sw.js"),
    )
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route; the API is described at /v1/openapi.json".into())
}

async fn openapi_json() -> Json<serde_json::Value> {
    Json(openapi::document())
}

/// The process is up. Says nothing about the database, on purpose: a
/// liveness probe that fails when the database is away gets every instance
/// restarted at once, which helps nobody.
async fn healthz() -> &'static str {
    "ok\n"
}

/// How long `/readyz` waits for the database to answer. Without a bound of
/// its own the ping waits the pool's whole `database.acquire_timeout` (10 s
/// by default) while sqlx retries a refused connect to a server that is down;
/// probers give up long before that (Kubernetes after 1 s by default) and
/// record a timeout, not the answer: the database-fault test
/// (`tests/db_faults.rs`) got no answer within 10 s while the database was
/// away. Two seconds is far above a healthy ping and below what a prober
/// waits.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `/readyz?only=database`: the database alone.
#[derive(Debug, serde::Deserialize)]
struct ReadyQuery {
    only: Option<String>,
}

/// Ready to do work: the database answers, within [`READY_TIMEOUT`], and
/// no provider has refused this instance's credential since it last
/// accepted one (see [`crate::delivery::health`]).
///
/// `?only=database` checks the database alone: what a load balancer should
/// route API traffic by. A refused push or SMS credential is the same on
/// every instance, so taking them all out of rotation for it would turn
/// "notifications fail" into "the API is down"; a monitor reads the full
/// answer and pages someone instead.
async fn readyz(State(state): State<AppState>, Query(q): Query<ReadyQuery>) -> Response {
    let answer = match tokio::time::timeout(READY_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {}s", READY_TIMEOUT.as_secs())),
    };
    if let Some(answer) = answer {
        // The detail goes to the log, not the body: this route is public, and a
        // driver's error can name internal hosts and ports.
        tracing::warn!(error = %answer, "not ready: database unreachable");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: database unreachable (the reason is in the server log)\n",
        )
            .into_response();
    }
    let problems = state.health.problems();
    if problems.is_empty() || q.only.as_deref() == Some("database") {
        return (StatusCode::OK, "ready\n").into_response();
    }
    // The provider's own words: a status and its error code, nothing of
    // this deployment's that the provider did not already say.
    let lines: String = problems
        .iter()
        .map(|(provider, words)| format!("{provider}: the provider refused Herald's credential: {words}\n"))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: a channel cannot deliver\n{lines}")).into_response()
}

/// Prometheus text format (0.0.4) unless the scraper asks for OpenMetrics
/// in `Accept`: promtool and many agents read only the former.
async fn metrics(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    // The outbox depth is read now; if the database is away the other
    // metrics are still worth serving.
    match state.store.status_summary(state.clock.now()).await {
        Ok(summary) => state.metrics.set_outbox(&summary),
        Err(e) => tracing::warn!(error = %e, "metrics: could not read outbox depth"),
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if crate::metrics::prefers_openmetrics(accept) {
        ([(header::CONTENT_TYPE, crate::metrics::OPENMETRICS_CONTENT_TYPE)], state.metrics.encode()).into_response()
    } else {
        ([(header::CONTENT_TYPE, crate::metrics::TEXT_CONTENT_TYPE)], state.metrics.encode_text()).into_response()
    }
}

#[cfg(test)]
mod tests {
    /// axum clones the state once per request at each layer that extracts
    /// it: that clone must stay one pointer, not a copy of the parts.
    #[test]
    fn the_state_clones_as_one_pointer() {
        assert_eq!(std::mem::size_of::<super::AppState>(), std::mem::size_of::<usize>());
    }
}
