//! A running server for HTTP tests: `herald::app::serve_until` on port 0 over
//! a fresh database, an API key, and a reqwest client.
//!
//! The planner and the worker are off unless a test turns them on, so nothing
//! moves behind a test's back; `deliver()` runs one worker sweep.

use std::sync::Arc;

use herald::clock::{Clock, Millis, SystemClock};
use herald::config::Config;
use herald::store::{OperatorRow, OperatorStore, RecipientStore};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Backend, TestDb};

pub struct App {
    pub base: String,
    pub key: String,
    pub http: reqwest::Client,
    pub db: TestDb,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The settings every harness server starts from: [`quiet_config`] with a
/// small body limit.
pub fn test_config(db: &TestDb) -> Config {
    let mut config = quiet_config(db);
    config.http.max_body_bytes = 4096;
    config
}

/// A server on `db` with an address secret, whose planner and worker are
/// off, so nothing moves behind the test's back (it runs them itself).
pub fn quiet_config(db: &TestDb) -> Config {
    let mut config = Config { database_url: db.url.clone(), ..Config::default() };
    config.email.address_secret = Some("a test secret of sufficient length".into());
    config.worker.enabled = false;
    config.planner.enabled = false;
    config
}

impl App {
    /// On `backend` (a test whose backend cannot be reached ends ignored,
    /// see `TestDb::new`).
    pub async fn start_on(backend: Backend, configure: impl FnOnce(&mut Config)) -> App {
        App::start_inner(backend, None, |c, _| configure(c)).await
    }

    /// On `backend`, configured knowing the server's own base URL (for a
    /// setting that points back at it, such as `http.public_url`).
    pub async fn start_on_at(backend: Backend, configure: impl FnOnce(&mut Config, &str)) -> App {
        App::start_inner(backend, None, configure).await
    }

    /// On `backend`, deciding by `clock` (a `ManualClock` the test moves)
    /// instead of the database's.
    pub async fn start_on_clock(backend: Backend, clock: Arc<dyn Clock>, configure: impl FnOnce(&mut Config)) -> App {
        App::start_inner(backend, Some(clock), |c, _| configure(c)).await
    }

    async fn start_inner(
        backend: Backend,
        clock: Option<Arc<dyn Clock>>,
        configure: impl FnOnce(&mut Config, &str),
    ) -> App {
        let db = TestDb::new(backend).await;
        let (key, row) = herald::http::auth::generate("tests", SystemClock.now());
        db.store.insert_api_key(&row).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut config = test_config(&db);
        configure(&mut config, &base);
        let shutdown = CancellationToken::new();
        let (store, token) = (db.store.clone(), shutdown.clone());
        let task = match clock {
            Some(clock) => tokio::spawn(herald::app::serve_with_clock(config, store, listener, token, clock)),
            None => tokio::spawn(herald::app::serve_until(config, store, listener, token)),
        };
        App { base, key, http: reqwest::Client::new(), db, shutdown, task }
    }

    pub async fn start() -> App {
        App::start_with(|_| {}).await
    }

    pub async fn start_with(configure: impl FnOnce(&mut Config)) -> App {
        App::start_on(Backend::Sqlite, configure).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request with the API key, its status and body (JSON when it parses).
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(&self.key, method, path, body).await
    }

    /// Like `call`, with `token` (a user's, say) instead of the API key.
    pub async fn call_as(&self, token: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Like `call`, with the response's content type.
    pub async fn call_typed(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, String, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        (status, ct, resp.json().await.unwrap_or_default())
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `PUT /v1/users/{id}` with `body`, which must be taken.
    pub async fn put_user(&self, id: &str, body: Value) {
        let (status, b) = self.call(reqwest::Method::PUT, &format!("/v1/users/{id}"), Some(body)).await;
        assert!(status == 200 || status == 201, "{b}");
    }

    /// `POST /v1/triggers` with `body`, which must be accepted.
    pub async fn trigger(&self, body: Value) {
        let (status, b) = self.post("/v1/triggers", body).await;
        assert_eq!(status, 202, "{b}");
    }

    /// The user's newest message once at least `count` messages exist and
    /// the serve instance's worker has been at each (none `sending`, none
    /// `scheduled` without an attempt), polled for at most ten seconds.
    pub async fn settled(&self, user_id: &str, count: usize) -> Value {
        for _ in 0..400 {
            let (_, sends) = self.get(&format!("/v1/users/{user_id}/sends")).await;
            let messages = sends["messages"].as_array().cloned().unwrap_or_default();
            let worked = |m: &Value| m["status"] != "sending" && (m["status"] != "scheduled" || m["attempts"] != 0);
            if messages.len() >= count && messages.iter().all(worked) {
                return messages[0].clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("{user_id}'s messages did not settle");
    }

    /// Asserts that `m` (a message from [`settled`](Self::settled)) is
    /// waiting for its second attempt, due `expected` milliseconds (give or
    /// take the test's own pace) after `before`: a provider's
    /// `Retry-After`, not the flat retry.
    pub fn assert_retried_after(
        m: &Value,
        before: chrono::DateTime<chrono::Utc>,
        expected: std::ops::RangeInclusive<i64>,
    ) {
        assert_eq!((m["status"].as_str(), m["attempts"].as_i64()), (Some("scheduled"), Some(1)), "{m}");
        let due = chrono::DateTime::parse_from_rfc3339(m["due_at"].as_str().unwrap()).unwrap();
        let wait = (due.with_timezone(&chrono::Utc) - before).num_milliseconds();
        assert!(expected.contains(&wait), "due {wait} ms after the trigger: {m}");
    }

    /// `GET /readyz`: its status and body.
    pub async fn readyz(&self) -> (u16, String) {
        let resp = self.http.get(self.url("/readyz")).send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    /// Runs one worker sweep over what is due now.
    pub async fn deliver(&self) -> herald::delivery::worker::TickReport {
        super::system_worker(self.db.arc()).tick().await.unwrap()
    }

    /// Signs in an operator (`ops@example.com`) for an hour, as the screen's
    /// login would: the operator and the session token to send as the
    /// `herald_session` cookie.
    pub async fn operator_session(&self) -> (OperatorRow, &'static str) {
        let now = SystemClock.now();
        let op =
            herald::http::ui::session::add_operator(&self.db.store, "ops@example.com", "a long enough password", now)
                .await
                .unwrap();
        let session = "a-session-token-for-this-test-only";
        let hash = herald::http::ui::session::session_hash(session);
        self.db.store.create_session(&hash, &op, now, Millis(now.0 + 3_600_000)).await.unwrap();
        (op, session)
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
        self.db.cleanup().await;
    }
}

/// The `herald_login` cookie and the login form's CSRF field, as a browser
/// gets them from `GET /ui/login`.
pub async fn login_form(http: &reqwest::Client, base: &str) -> (String, String) {
    let resp = http.get(format!("{base}/ui/login")).send().await.unwrap();
    let cookie = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("herald_login="))
        .expect("the login page sets its cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let html = resp.text().await.unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    (cookie, csrf)
}

/// A mail client's one-click unsubscribe (RFC 8058): `POST url` with the
/// `List-Unsubscribe=One-Click` form body.
pub async fn one_click(http: &reqwest::Client, url: &str) -> reqwest::Response {
    http.post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap()
}

/// An inbox rule on `trigger_type` in category `exports`, with an English
/// and a German variant that read the payload and the user.
pub fn inbox_rule(trigger_type: &str, enabled: bool) -> Value {
    json!({
        "name": format!("rule for {trigger_type}"),
        "trigger_type": trigger_type,
        "channel": "inbox",
        "category": "exports",
        "delay": 0,
        "enabled": enabled,
        "template": {
            "fallback_locale": "en",
            "locales": {
                "en": { "subject": "Export {{ payload.name }} ready", "text": "Hi {{ user.name or user.id }}" },
                "de": { "subject": "Export {{ payload.name }} fertig", "text": "Hallo" }
            }
        }
    })
}
