//! The two Server-Sent Events streams (`/v1/events/stream` with an API key,
//! `/v1/inbox/stream` with a user token) as a client holds them open, on
//! SQLite, PostgreSQL and MariaDB, against a running server whose clock the
//! test moves (`ManualClock`).
//!
//! A stream outlived its credential (an API key revoked with
//! `herald keys revoke`, a user token past its `exp`); now it ends, with an
//! `end` event saying why, within the key cache's staleness of the
//! revocation and at the token's expiry. And a malformed `Last-Event-ID` (`abc`, `1e3`, `3.0`, a number
//! past i64) replayed the whole retained history, and one ahead of the
//! counter waited silently; now the first is a `400` naming the header and
//! the second starts the stream from now.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::app::App;
use common::harness;
use common::sse::{Events, Next};
use common::{Backend, T0};
use herald::clock::{Clock, ManualClock};
use herald::delivery::worker::WorkerConfig;
use herald::store::{EventStore, RecipientStore, Store};
use serde_json::{Value, json};

/// How long a test waits for what must come promptly: only a safety net,
/// nothing here waits for time to pass.
const SOON: Duration = Duration::from_secs(10);

const TOKEN_TTL: Duration = Duration::from_secs(600);

async fn start(backend: Backend, clock: &ManualClock) -> App {
    App::start_on_clock(backend, Arc::new(clock.clone()), |c| {
        c.inbox.token_secret = Some("a token secret for the stream tests, long enough".into());
        c.inbox.token_ttl = TOKEN_TTL;
    })
    .await
}

/// An inbox message for `user`, delivered by a worker sweep on the test's
/// clock: one `outcome` event, one inbox message.
async fn deliver_inbox(app: &App, clock: &ManualClock, user: &str, title: &str) {
    let now = clock.now();
    let mut row = common::row(user, "inbox", now);
    row.payload = json!({ "title": title });
    app.db.store.enqueue(&[row], now).await.unwrap();
    let worker = common::worker(app.db.arc(), herald::app::registry(), clock, WorkerConfig::default());
    assert_eq!(worker.tick().await.unwrap().sent, 1);
}

async fn user_token(app: &App, user: &str) -> String {
    let (status, body) = app.post(&format!("/v1/users/{user}/token"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

/// `GET path` with `Last-Event-ID: id`, as the API key or a user token.
async fn open(app: &App, path: &str, bearer: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut req = app.http.get(app.url(path)).bearer_auth(bearer);
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id);
    }
    req.send().await.unwrap()
}

async fn a_malformed_last_event_id_is_refused_on_both_streams(backend: Backend) {
    let clock = ManualClock::at(T0);
    let app = start(backend, &clock).await;
    deliver_inbox(&app, &clock, "ada", "kept").await;
    let token = user_token(&app, "ada").await;
    for (path, bearer) in [("/v1/events/stream", &app.key), ("/v1/inbox/stream", &token)] {
        for bad in ["abc", "1e3", "3.0", "9223372036854775808", "99999999999999999999", "-1", "+5"] {
            let resp = open(&app, path, bearer, Some(bad)).await;
            let status = resp.status().as_u16();
            // Checked before the body is read: a stream's body never ends.
            assert_eq!(status, 400, "{path} with Last-Event-ID {bad:?}");
            let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
            let body = resp.text().await.unwrap();
            assert_eq!(ct.as_deref(), Some("application/problem+json"), "{path} {bad:?}");
            let problem: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(problem["errors"][0]["field"], "Last-Event-ID", "{problem}");
            let detail = problem["detail"].as_str().unwrap();
            assert!(
                detail.contains("Last-Event-ID")
                    && detail.contains(&format!("{bad:?}"))
                    && detail.contains("a whole number from 0 to 9223372036854775807"),
                "the detail names the header, the value and what is accepted: {detail}"
            );
        }
        // What Herald hands out is still taken.
        let resp = open(&app, path, bearer, Some("0")).await;
        assert_eq!(resp.status().as_u16(), 200, "{path} with Last-Event-ID 0");
    }
    app.stop().await;
}

async fn a_last_event_id_from_the_future_starts_from_now(backend: Backend) {
    let clock = ManualClock::at(T0);
    let app = start(backend, &clock).await;
    deliver_inbox(&app, &clock, "ada", "before").await;
    let newest = app.db.store.newest_position().await.unwrap();
    assert!(newest > 0);
    let ahead = (newest + 1_000_000).to_string();
    let token = user_token(&app, "ada").await;

    let mut events = Events::new(open(&app, "/v1/events/stream", &app.key, Some(&ahead)).await);
    let ready = events.expect("ready", SOON).await.json();
    assert_eq!(ready["after"], newest, "starts from now: {ready}");
    let note = ready["note"].as_str().unwrap_or_default();
    assert!(note.contains(&ahead) && note.contains("starting from now"), "and says why: {ready}");
    let mut inbox = Events::new(open(&app, "/v1/inbox/stream", &token, Some(&ahead)).await);
    inbox.expect("count", SOON).await;

    // What is committed next reaches both, instead of waiting for the
    // counter to pass an id it may never reach.
    deliver_inbox(&app, &clock, "ada", "after").await;
    let outcome = events.expect("outcome", SOON).await;
    assert!(outcome.position() > newest);
    assert_eq!(outcome.json()["user_id"], "ada");
    let message = inbox.expect("message", SOON).await;
    assert_eq!(message.json()["title"], "after", "and nothing from before");
    drop((events, inbox));

    // A follower's own position still resumes right after it.
    let mut resumed = Events::new(open(&app, "/v1/events/stream", &app.key, Some(&newest.to_string())).await);
    assert_eq!(resumed.expect("ready", SOON).await.json(), json!({ "after": newest }));
    assert_eq!(resumed.expect("outcome", SOON).await.position(), outcome.position());
    drop(resumed);
    app.stop().await;
}

/// `herald keys revoke ID` against the test's database, as an operator runs it.
async fn revoke_with_the_cli(app: &App, id: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["keys", "revoke", id])
        .current_dir(dir.path())
        .env("HERALD_DATABASE_URL", &app.db.url)
        .env("HERALD_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "herald keys revoke: {}", String::from_utf8_lossy(&out.stderr));
}

async fn an_event_stream_ends_when_its_key_is_revoked(backend: Backend) {
    let clock = ManualClock::at(T0);
    let app = start(backend, &clock).await;
    let mut events = Events::new(open(&app, "/v1/events/stream", &app.key, None).await);
    events.expect("ready", SOON).await;
    deliver_inbox(&app, &clock, "ada", "while the key works").await;
    events.expect("outcome", SOON).await;

    let keys = app.db.store.list_api_keys().await.unwrap();
    revoke_with_the_cli(&app, &keys[0].id).await;
    // A revoked key stops working everywhere within the key cache's
    // staleness: the test moves the clock past it rather than wait.
    clock.advance(herald::http::auth::KEY_CACHE_TTL);
    let end = events.expect("end", SOON).await.json();
    assert_eq!(end["reason"], "key_revoked", "{end}");
    assert_eq!(end["detail"], "this API key was revoked", "{end}");
    assert!(matches!(events.next(SOON).await, Next::Ended), "the stream is closed");

    // The client's reconnect is refused, so it stops trying.
    let resp = open(&app, "/v1/events/stream", &app.key, None).await;
    assert_eq!(resp.status().as_u16(), 401);
    app.stop().await;
}

async fn an_inbox_stream_ends_when_its_token_expires(backend: Backend) {
    let clock = ManualClock::at(T0);
    let app = start(backend, &clock).await;
    let token = user_token(&app, "ada").await;
    let mut inbox = Events::new(open(&app, "/v1/inbox/stream", &token, None).await);
    inbox.expect("count", SOON).await;

    // A second before the token expires the stream still carries messages.
    clock.advance(TOKEN_TTL - Duration::from_secs(1));
    deliver_inbox(&app, &clock, "ada", "just in time").await;
    assert_eq!(inbox.expect("message", SOON).await.json()["title"], "just in time");

    clock.advance(Duration::from_secs(1));
    let end = inbox.expect("end", SOON).await.json();
    assert_eq!(end["reason"], "token_expired", "{end}");
    assert!(end["detail"].as_str().unwrap().contains("fresh"), "says what to do: {end}");
    assert!(matches!(inbox.next(SOON).await, Next::Ended), "the stream is closed");

    // What the widget does next: its reconnect is refused, it asks its page
    // for a fresh token, and that one streams again.
    let resp = open(&app, "/v1/inbox/stream", &token, None).await;
    assert_eq!(resp.status().as_u16(), 401);
    let fresh = user_token(&app, "ada").await;
    let mut again = Events::new(open(&app, "/v1/inbox/stream", &fresh, None).await);
    again.expect("count", SOON).await;
    deliver_inbox(&app, &clock, "ada", "with a fresh token").await;
    assert_eq!(again.expect("message", SOON).await.json()["title"], "with a fresh token");
    drop(again);
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    harness::main(per_backend_tests![
        an_event_stream_ends_when_its_key_is_revoked,
        an_inbox_stream_ends_when_its_token_expires,
        a_malformed_last_event_id_is_refused_on_both_streams,
        a_last_event_id_from_the_future_starts_from_now,
    ])
}
