//! `GET /v1/users/{id}/sends` read while the worker delivers: each message's
//! status and its history come from one snapshot, on
//! SQLite, PostgreSQL and MariaDB, under real concurrent requests against a
//! running server with its worker on.
//!
//! Before, the rows and the send log were two reads: a row read just before
//! a worker's commit and its log just after showed `scheduled, attempts 0`
//! with `sent` already in its history (21 of 450 reads in the review).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::Backend;
use common::app::App;
use serde_json::{Value, json};

/// Triggers posted, one message each.
const TRIGGERS: usize = 120;
/// Concurrent readers of the send log while they are delivered.
const READERS: usize = 4;

fn inbox_rule() -> Value {
    json!({
        "name": "snapshot check",
        "trigger_type": "snapshot.check",
        "channel": "inbox",
        "category": "updates",
        "delay": 0,
        "enabled": true,
        "template": { "fallback_locale": "en", "locales": { "en": { "subject": "Hello", "text": "Hi" } } }
    })
}

/// What is inconsistent in one answer: a message whose status and history
/// disagree about whether it was sent.
fn torn(answer: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for m in answer["messages"].as_array().into_iter().flatten() {
        let logged_sent = m["history"].as_array().into_iter().flatten().any(|e| e["status"] == "sent");
        let is_sent = m["status"] == "sent";
        if logged_sent != is_sent {
            found.push(format!(
                "{} is {} (attempts {}) with history {}",
                m["outbox_id"], m["status"], m["attempts"], m["history"]
            ));
        }
    }
    found
}

async fn a_message_and_its_history_are_read_in_one_snapshot(backend: Backend) {
    let app = App::start_on(backend, |c| c.worker.enabled = true).await;
    let (status, rule) = app.post("/v1/rules", inbox_rule()).await;
    assert_eq!(status, 201, "{rule}");

    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let (http, url, key) = (app.http.clone(), app.url("/v1/users/reader-1/sends"), app.key.clone());
        let (stop, reads) = (stop.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            let mut torn_reads = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let resp = http.get(&url).bearer_auth(&key).send().await.unwrap();
                assert_eq!(resp.status().as_u16(), 200);
                let answer: Value = resp.json().await.unwrap();
                reads.fetch_add(1, Ordering::SeqCst);
                torn_reads.extend(torn(&answer));
            }
            torn_reads
        }));
    }
    for i in 0..TRIGGERS {
        let (status, body) = app
            .post("/v1/triggers", json!({"type": "snapshot.check", "user_id": "reader-1", "payload": {"i": i}}))
            .await;
        assert_eq!(status, 202, "{body}");
    }
    // Until every message is sent; the deadline only keeps a broken build
    // from hanging the suite.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (_, answer) = app.get("/v1/users/reader-1/sends").await;
        let messages = answer["messages"].as_array().map(Vec::len).unwrap_or(0);
        let sent = answer["messages"].as_array().into_iter().flatten().filter(|m| m["status"] == "sent").count();
        if messages == TRIGGERS && sent == TRIGGERS {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{sent} of {TRIGGERS} sent after 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut torn_reads = Vec::new();
    for r in readers {
        torn_reads.extend(r.await.unwrap());
    }
    let reads = reads.load(Ordering::SeqCst);
    eprintln!("{backend:?}: {reads} reads during {TRIGGERS} deliveries, {} torn", torn_reads.len());
    assert!(reads >= TRIGGERS, "only {reads} reads overlapped the deliveries");
    assert!(torn_reads.is_empty(), "{} torn messages in {reads} reads, e.g. {}", torn_reads.len(), torn_reads[0]);
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(per_backend_tests![a_message_and_its_history_are_read_in_one_snapshot])
}
