//! The operator screen under `/ui`: rules and the switch that turns them on,
//! the outbox, the send log, suppressions and bounces, the audit log, behind
//! an operator login.
//!
//! # Why server-rendered pages
//! The screen is for a handful of operators who use it daily from a laptop
//! or a phone. Server-rendered HTML (minijinja, already Herald's template
//! engine) with plain forms needs no build step, no JavaScript bundle and no
//! second API: every page calls the same store, planner and template
//! functions the `/v1` handlers call. The pages use no JavaScript at all; the
//! one confirmation step (enabling a rule) is a server-rendered preview page,
//! so the Content-Security-Policy can forbid scripts outright.
//!
//! # Layout
//! - [`session`]: login, logout, the session cookie, CSRF tokens, the login
//!   rate limit, and `herald operators add`'s password hashing.
//! - [`rules`], [`outbox`], [`sends`], [`triggers`], [`suppressions`],
//!   [`audit`]: one page family each.
//! - this file: the router, security headers, the page layout, flash
//!   messages and errors, and [`hosted_page`], which renders the two pages
//!   Herald hosts for end users (`templates/hosted_*.html`: the preference
//!   page and the unsubscribe page) with the same templates and escaping.

pub mod audit;
pub mod outbox;
mod rule_workflow;
pub mod rules;
pub mod sends;
pub mod session;
pub mod suppressions;
pub mod triggers;

use std::sync::LazyLock;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use minijinja::{Environment, Value};
use serde::Serialize;

use crate::clock::Millis;
use crate::http::AppState;
use crate::http::problem::ApiError;
use crate::store::{AuditEntry, StoreError};
use session::Operator;

/// The screen's routes, to be nested under `/ui` outside the API-key layer.
pub fn router(state: AppState) -> Router<AppState> {
    let protected = Router::new()
        .route("/", get(|| async { Redirect::to("/ui/rules") }))
        .route("/logout", post(session::logout))
        .route("/rules", get(rules::list))
        .route("/rules/new", get(rules::new_form).post(rules::create))
        .route("/rules/{id}", get(rules::edit_form).post(rules::save))
        .route("/rules/{id}/enable", get(rules::confirm_enable).post(rules::enable))
        .route("/rules/{id}/disable", post(rules::disable))
        .route("/rules/{id}/delete", get(rules::confirm_delete).post(rules::delete))
        .route("/outbox", get(outbox::list))
        .route("/outbox/retry", post(outbox::retry_matching))
        .route("/outbox/{id}", get(outbox::detail))
        .route("/outbox/{id}/retry", post(outbox::retry))
        .route("/outbox/{id}/cancel", post(outbox::cancel))
        .route("/sends", get(sends::search))
        .route("/sends/preferences", post(sends::change_preferences))
        .route("/suppressions", get(suppressions::list).post(suppressions::add))
        .route("/suppressions/lift", post(suppressions::lift))
        .route("/suppressions/{hash}", get(suppressions::evidence))
        .route("/triggers/{id}", get(triggers::show))
        .route("/triggers/{id}/cancel", get(triggers::confirm_cancel).post(triggers::cancel))
        .route("/audit", get(audit::list))
        .route_layer(middleware::from_fn_with_state(state, session::require_operator));
    Router::new()
        .route("/login", get(session::login_form).post(session::login))
        .route("/static/herald.css", get(css))
        .merge(protected)
        .fallback(not_found)
        .layer(middleware::from_fn(security_headers))
}

/// What every signed-in page handler starts from: the state and the operator
/// [`session::require_operator`] put in the request, taken as one argument
/// (`Ui { state, op }: Ui`) rather than the same two extractors on each
/// route behind the session layer. It extracts exactly what `State` and
/// `Extension<Operator>` did, with the same rejection when the operator is
/// missing (a route outside the session layer: a server bug, a 500).
pub struct Ui {
    pub state: AppState,
    pub op: Operator,
}

impl axum::extract::FromRequestParts<AppState> for Ui {
    type Rejection = <axum::Extension<Operator> as axum::extract::FromRequestParts<AppState>>::Rejection;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let axum::Extension(op) = axum::Extension::<Operator>::from_request_parts(parts, state).await?;
        Ok(Ui { state: state.clone(), op })
    }
}

/// Headers on every `/ui` response. The CSP allows nothing but this server
/// (no inline script or style, no frames of or by others), so an injection
/// that slipped past auto-escaping still could not run script or exfiltrate
/// through a stylesheet; `no-store` keeps operator data out of shared caches
/// and the back button after logout.
async fn security_headers(req: axum::extract::Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, name: header::HeaderName, value: &'static str| {
        h.entry(name).or_insert(HeaderValue::from_static(value));
    };
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'",
    );
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::CACHE_CONTROL, "no-store");
    resp
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=300")],
        include_str!("static/herald.css"),
    )
        .into_response()
}

async fn not_found() -> UiError {
    UiError::NotFound("no such page".into())
}

/// The templates, compiled once. HTML auto-escaping is on (minijinja's
/// default for `.html` names): every value from the database or a form is
/// escaped unless a page marks it safe, which only the layout's body is.
/// No `extends`/`include`: those need minijinja's `multi_template` feature,
/// which stays off so operator-authored message templates cannot use them
/// either; the layout takes the rendered page as a value instead.
static TEMPLATES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
    env.add_filter("when", when);
    env.add_filter("dur", duration);
    env.add_filter("n", |n: i64| crate::http::trigger_report::thousands(n));
    env.add_filter("q", |v: Value| url::form_urlencoded::byte_serialize(v.to_string().as_bytes()).collect::<String>());
    // A preference form's box (see `http::preference_form`), escaped by the
    // template like any other value.
    env.add_function("preference_box", |category: String, channel: String| {
        crate::http::preference_form::box_value(&category, &channel)
    });
    env.add_function("topic_box", |topic: String| crate::http::preference_form::topic_box_value(&topic));
    for (name, source) in [
        ("layout.html", include_str!("templates/layout.html")),
        ("login.html", include_str!("templates/login.html")),
        ("error.html", include_str!("templates/error.html")),
        ("rules.html", include_str!("templates/rules.html")),
        ("rule_edit.html", include_str!("templates/rule_edit.html")),
        ("rule_enable.html", include_str!("templates/rule_enable.html")),
        ("rule_delete.html", include_str!("templates/rule_delete.html")),
        ("outbox.html", include_str!("templates/outbox.html")),
        ("outbox_row.html", include_str!("templates/outbox_row.html")),
        ("sends.html", include_str!("templates/sends.html")),
        ("suppressions.html", include_str!("templates/suppressions.html")),
        ("suppression.html", include_str!("templates/suppression.html")),
        ("trigger.html", include_str!("templates/trigger.html")),
        ("audit.html", include_str!("templates/audit.html")),
        ("hosted_preferences.html", include_str!("templates/hosted_preferences.html")),
        ("hosted_unsubscribe.html", include_str!("templates/hosted_unsubscribe.html")),
    ] {
        env.add_template(name, source).unwrap_or_else(|e| panic!("UI template {name} does not compile: {e:#}"));
    }
    env
});

/// A page Herald hosts for the people it writes to, outside the operator
/// screen: the preference page (`/p/{token}`, [`crate::http::preferences`])
/// and the unsubscribe page (`/u/{token}`, [`crate::http::unsubscribe`]).
/// `template` is a whole document (no layout, navigation or session),
/// rendered from the same environment and with the same auto-escaping as
/// the screen's pages, so no handler writes HTML or escapes by hand.
/// `no-store` and `no-referrer`: the page's address is the user's signed
/// link, to be kept out of caches and out of the `Referer` of any link
/// followed from it.
pub fn hosted_page(template: &'static str, ctx: impl Serialize) -> Response {
    match TEMPLATES.get_template(template).and_then(|t| t.render(Value::from(minijinja::value::Serde(&ctx)))) {
        Ok(html) => {
            let mut r = axum::response::Html(html).into_response();
            r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r.headers_mut().insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            r
        }
        Err(e) => {
            tracing::error!(template, error = %format!("{e:#}"), "hosted page failed to render");
            (StatusCode::INTERNAL_SERVER_ERROR, "this page failed to render; the error was logged").into_response()
        }
    }
}

/// `2026-12-02 16:31:05 UTC` from epoch milliseconds or an RFC 3339 string.
fn when(v: Value) -> String {
    let t = match v.as_i64() {
        Some(ms) => chrono::DateTime::from_timestamp_millis(ms),
        None => v.as_str().and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok()).map(|t| t.to_utc()),
    };
    match t {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        None if v.is_none() || v.is_undefined() => "—".into(),
        None => v.to_string(),
    }
}

/// Seconds as `1h 30m`; none as "none".
fn duration(v: Value) -> String {
    match v.as_i64() {
        Some(0) => "0s".into(),
        Some(s) if s > 0 => humantime::format_duration(std::time::Duration::from_secs(s as u64)).to_string(),
        _ => "none".into(),
    }
}

/// The navigation entries: (path, label). `active` in [`Page`] is a path.
const NAV: [(&str, &str); 5] = [
    ("/ui/rules", "Rules"),
    ("/ui/outbox", "Outbox"),
    ("/ui/sends", "Send log"),
    ("/ui/suppressions", "Suppressions"),
    ("/ui/audit", "Audit log"),
];

/// A page to render inside the layout.
pub struct Page<'a> {
    pub title: String,
    /// Which navigation entry is highlighted.
    pub active: &'static str,
    pub template: &'static str,
    pub status: StatusCode,
    pub ctx: serde_json::Value,
    pub op: Option<&'a Operator>,
}

impl<'a> Page<'a> {
    pub fn new(op: &'a Operator, active: &'static str, template: &'static str, title: impl Into<String>) -> Self {
        Page { title: title.into(), active, template, status: StatusCode::OK, ctx: serde_json::json!({}), op: Some(op) }
    }

    pub fn with(mut self, ctx: impl Serialize) -> Self {
        self.ctx = serde_json::to_value(ctx).unwrap_or_default();
        self
    }

    pub fn status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }
}

#[derive(Debug, Clone, Serialize)]
struct NavItem {
    href: &'static str,
    label: &'static str,
    active: bool,
}

impl IntoResponse for Page<'_> {
    fn into_response(self) -> Response {
        let mut ctx = match self.ctx {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        let csrf = self.op.map(|o| o.csrf.clone()).unwrap_or_default();
        ctx.insert("csrf".into(), csrf.clone().into());
        let body = match TEMPLATES
            .get_template(self.template)
            .and_then(|t| t.render(Value::from(minijinja::value::Serde(&ctx))))
        {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(template = self.template, error = %format!("{e:#}"), "UI page failed to render");
                return (StatusCode::INTERNAL_SERVER_ERROR, "this page failed to render; the error was logged")
                    .into_response();
            }
        };
        let nav: Vec<NavItem> =
            NAV.iter().map(|&(href, label)| NavItem { href, label, active: href == self.active }).collect();
        let layout = minijinja::context! {
            title => self.title,
            me => self.op.map(|o| o.email.clone()),
            csrf => csrf,
            flash => self.op.and_then(|o| o.flash.clone()),
            nav => Value::from(minijinja::value::Serde(if self.op.is_some() { nav } else { vec![] })),
            body => Value::from_safe_string(body),
        };
        match TEMPLATES.get_template("layout.html").and_then(|t| t.render(layout)) {
            Ok(html) => {
                let mut resp = (self.status, axum::response::Html(html)).into_response();
                if self.op.is_some_and(|o| o.flash.is_some()) {
                    // Shown once: the next page does not repeat it.
                    resp.headers_mut().append(header::SET_COOKIE, session::clear_cookie(session::FLASH_COOKIE));
                }
                resp
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "UI layout failed to render");
                (StatusCode::INTERNAL_SERVER_ERROR, "this page failed to render; the error was logged").into_response()
            }
        }
    }
}

/// A 303 to `to`, with a message for the next page to show once.
pub fn redirect_with(state: &AppState, to: &str, flash: impl AsRef<str>) -> Response {
    let mut resp = Redirect::to(to).into_response();
    resp.headers_mut().append(header::SET_COOKIE, session::flash_cookie(state, flash.as_ref()));
    resp
}

/// Appends an audit row for an action that already committed. Failing to
/// write it is logged loudly but does not turn the (done) action into an
/// error page, which would invite the operator to do it twice.
pub async fn audit(state: &AppState, op: &Operator, action: &str, target: &str, detail: Option<String>) {
    let entry = AuditEntry { operator_email: op.email.clone(), action: action.into(), target: target.into(), detail };
    if let Err(e) = state.store.append_audit(&entry, state.clock.now()).await {
        tracing::error!(error = %e, operator = %op.email, action, target, "could not write the audit log");
    }
}

/// What a page handler can fail with; rendered as an error page.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            UiError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            UiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            UiError::Store(e) | UiError::Api(ApiError::Store(e)) => {
                tracing::error!(error = %e, "operator screen: database error");
                (StatusCode::INTERNAL_SERVER_ERROR, "a database error stopped this page; it was logged".to_owned())
            }
            UiError::Api(e) => {
                let message = describe(&e);
                (e.into_response().status(), message)
            }
        };
        error_page(status, &message)
    }
}

/// An error page without navigation (it may be shown to someone not logged in).
pub fn error_page(status: StatusCode, message: &str) -> Response {
    let page = Page {
        title: status.canonical_reason().unwrap_or("Error").to_owned(),
        active: "",
        template: "error.html",
        status,
        ctx: serde_json::json!({ "status": status.as_u16(), "message": message }),
        op: None,
    };
    page.into_response()
}

/// An [`ApiError`]'s message as an operator reads it: the detail, and for
/// invalid fields each field with its problem.
pub fn describe(e: &ApiError) -> String {
    match e {
        ApiError::Invalid(errors) => {
            errors.iter().map(|f| format!("{}: {}", f.field, f.message)).collect::<Vec<_>>().join("; ")
        }
        ApiError::Store(_) => "a database error stopped this; it was logged".into(),
        other => other.to_string(),
    }
}

/// `now - d` for "recent" queries.
pub fn ago(state: &AppState, d: std::time::Duration) -> Millis {
    state.clock.now().minus(d)
}
