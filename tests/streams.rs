//! The two Server-Sent Events streams (`/v1/events/stream` with an API key,
//! `/v1/inbox/stream` with a user token) as a client holds them open, on
//! SQLite, PostgreSQL and MariaDB, against a running server whose clock the
//! test moves (`ManualClock`).
//!
//! Issue 27: a malformed `Last-Event-ID` (`abc`, `1e3`, `3.0`, a number
//! past i64) replayed the whole retained history, and one ahead of the
//! counter waited silently; now the first is a `400` naming the header and
//! the second starts the stream from now.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::app::App;
use common::harness::{self, Trial};
use common::sse::Events;
use common::{Backend, T0};
use herald::clock::{Clock, ManualClock};
use herald::delivery::worker::WorkerConfig;
use herald::store::{EventStore, Store};
use serde_json::{Value, json};

/// How long a test waits for what must come promptly: only a safety net,
/// nothing here waits for time to pass.
const SOON: Duration = Duration::from_secs(10);

async fn start(backend: Backend, clock: &ManualClock) -> App {
    App::start_on_clock(backend, Arc::new(clock.clone()), |c| {
        c.inbox.token_secret = Some("a token secret for the stream tests, long enough".into());
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

fn main() -> std::process::ExitCode {
    let mut trials: Vec<Trial> = Vec::new();
    for (prefix, backend) in [("sqlite", Backend::Sqlite), ("postgres", Backend::Postgres), ("mysql", Backend::MySql)] {
        macro_rules! per_backend {
            ($($name:ident),* $(,)?) => {
                $(trials.push(harness::test(format!("{prefix}::{}", stringify!($name)), move || $name(backend)));)*
            };
        }
        per_backend!(
            a_malformed_last_event_id_is_refused_on_both_streams,
            a_last_event_id_from_the_future_starts_from_now
        );
    }
    harness::main(trials)
}
