//! Hostile input that passes validation but not every database: U+0000,
//! which PostgreSQL's `text` refuses while SQLite and MariaDB store it, and
//! provider strings longer than the column they land in on MariaDB. Each case
//! was a 500 (or a message retried until it failed) on one backend only; the
//! same requests now get the same answer on all three.
//!
//! Found while writing the `json_body` fuzz target's storage invariants
//! (`herald::tooling::fuzzing`, "check_column"); the pure halves of these cases are
//! replayed by `tests/fuzz_regressions.rs`.

mod common;

use std::sync::Arc;

use common::TestDb;
use herald::clock::{Clock, SystemClock};
use herald::domain::UserId;
use herald::store::{InboxFilter, RecipientStore, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct App {
    base: String,
    key: String,
    http: reqwest::Client,
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl App {
    async fn start(db: &TestDb) -> App {
        let (key, row) = herald::http::auth::generate("tests", SystemClock.now());
        db.store.insert_api_key(&row).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let config = common::app::quiet_config(db);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(herald::app::serve_until(config, db.store.clone(), listener, shutdown.clone()));
        App { base, key, http: reqwest::Client::new(), store: db.arc(), shutdown, task }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let resp =
            self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key).json(&body).send().await;
        let resp = resp.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, body).await
    }

    /// One worker sweep over everything due.
    async fn deliver(&self) -> herald::delivery::worker::TickReport {
        common::system_worker(self.store.clone()).tick().await.unwrap()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

fn rule(trigger_type: &str) -> Value {
    json!({
        "name": "hostile", "trigger_type": trigger_type, "channel": "inbox", "category": "c", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {
            "subject": "S {{ payload.s }}", "text": "T {{ payload.s }}\u{0}"}}}
    })
}

fn fields(problem: &Value) -> Vec<&str> {
    problem["errors"].as_array().map(|e| e.iter().filter_map(|f| f["field"].as_str()).collect()).unwrap_or_default()
}

async fn stored_rule_text_with_nul_is_refused(db: &TestDb) {
    let app = App::start(db).await;
    // A condition that compiles (the NUL is inside a string literal).
    let mut r = rule("nul.condition");
    r["condition"] = json!("payload.s != \"a\u{0}b\"");
    let (status, body) = app.post("/v1/rules", r.clone()).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(fields(&body), vec!["condition"], "{body}");
    assert!(body.to_string().contains("U+0000"), "{body}");

    let mut w = rule("nul.webhook");
    w["channel"] = json!("webhook");
    w["webhook_url"] = json!("https://hooks.example.com/a\u{0}b");
    let (status, body) = app.post("/v1/rules", w.clone()).await;
    assert_eq!((status, fields(&body)), (422, vec!["webhook_url"]), "{body}");
    w["webhook_url"] = json!(format!("https://hooks.example.com/{}", "a".repeat(70_000)));
    let (status, body) = app.post("/v1/rules", w).await;
    assert_eq!((status, fields(&body)), (422, vec!["webhook_url"]), "{body}");

    // The same through PATCH, on a rule that was fine.
    r["condition"] = json!("payload.s != \"ab\"");
    let (status, created) = app.post("/v1/rules", r).await;
    assert_eq!(status, 201, "{created}");
    let path = format!("/v1/rules/{}", created["id"].as_str().unwrap());
    let (status, body) = app.send(reqwest::Method::PATCH, &path, json!({"condition": "payload.s != \"\u{0}\""})).await;
    assert_eq!((status, fields(&body)), (422, vec!["condition"]), "{body}");
    app.stop().await;
}

async fn suppression_detail_with_nul_is_refused(db: &TestDb) {
    let app = App::start(db).await;
    let (status, body) = app.post("/v1/suppressions", json!({"email": "a@example.com", "detail": "x\u{0}y"})).await;
    assert_eq!((status, fields(&body)), (422, vec!["detail"]), "{body}");
    let (status, body) = app.post("/v1/suppressions", json!({"email": "a@example.com", "detail": "xy"})).await;
    assert_eq!(status, 201, "{body}");
    app.stop().await;
}

/// The payload is the host application's data and is accepted as it is; a
/// NUL in it (or in the template) reaches the inbox as U+FFFD instead of
/// failing the insert on PostgreSQL on every attempt.
async fn nul_in_a_payload_is_delivered_as_a_replacement_character(db: &TestDb) {
    let app = App::start(db).await;
    let (status, body) = app.post("/v1/rules", rule("nul.payload")).await;
    assert_eq!(status, 201, "{body}");
    let trigger = json!({"type": "nul.payload", "user_id": "u-nul",
        "payload": {"s": "a\u{0}b", "url": "https://app.example.com/\u{0}"}});
    let (status, body) = app.post("/v1/triggers", trigger).await;
    assert_eq!(status, 202, "{body}");
    let report = app.deliver().await;
    let user = UserId::parse("user_id", "u-nul").unwrap();
    let pending = app.store.pending_for_user(&user, 10).await.unwrap();
    assert_eq!(report.sent, 1, "{report:?} {:?}", pending.iter().map(|r| &r.last_error).collect::<Vec<_>>());
    let inbox = app.store.inbox_page(&user, InboxFilter::All, None, 10).await.unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].title, "S a\u{FFFD}b");
    assert_eq!(inbox[0].body.as_deref(), Some("T a\u{FFFD}b\u{FFFD}"));
    assert_eq!(inbox[0].url.as_deref(), Some("https://app.example.com/\u{FFFD}"));
    app.stop().await;
}

/// Raw bounce bytes are evidence: a NUL in them is filed, not a 500. (A
/// provider's odd `status` is covered by the providers' unit tests and the
/// `json_body` regressions; its webhooks need signatures this test lacks.)
async fn bounce_evidence_with_nul_is_recorded(db: &TestDb) {
    let app = App::start(db).await;
    let raw = b"From: MAILER-DAEMON@mx.example.net\r\nTo: app@example.com\r\nSubject: Undelivered\r\n\
        MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
        --B\r\nContent-Type: text/plain\r\n\r\nfailed \0 here\r\n--B\r\nContent-Type: message/delivery-status\r\n\r\n\
        Reporting-MTA: dns; mx.example.net\r\n\r\nFinal-Recipient: rfc822; ann@example.com\r\nAction: failed\r\n\
        Status: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1 no such user \0 at all\r\n--B--\r\n";
    let resp = app
        .http
        .post(format!("{}/v1/bounces/mail", app.base))
        .bearer_auth(&app.key)
        .body(raw.to_vec())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let report: Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["recorded"], 1, "{report}");
    let bounces = app.store.list_bounces(10).await.unwrap();
    assert_eq!(bounces.len(), 1);
    let b = serde_json::to_value(&bounces[0]).unwrap();
    assert!(!b.to_string().contains("\\u0000"), "{b}");
    app.stop().await;
}

backend_tests!(
    stored_rule_text_with_nul_is_refused,
    suppression_detail_with_nul_is_refused,
    nul_in_a_payload_is_delivered_as_a_replacement_character,
    bounce_evidence_with_nul_is_recorded,
);

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
