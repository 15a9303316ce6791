//! Digests and the answers about them (issue 27, items 4, 22, 23 and 26):
//! a trigger dated in the future, the subject and the answer of a digest,
//! `herald sends` for a user with only a held message, and digests on a
//! calendar. Each test failed on the code before its fix; the clock is the
//! manual one wherever the planner or the worker reads it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Backend, TestDb, user, worker};
use herald::clock::{Clock, ManualClock, Millis};
use herald::delivery::worker::WorkerConfig;
use herald::planning::planner::Planner;
use herald::planning::rule::RuleInput;
use herald::store::{NewTrigger, RuleRow, RuleStore, TriggerStore};
use serde_json::{Value, json};

fn at(s: &str) -> Millis {
    Millis(chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis())
}

/// A rule from API JSON (with `extra` fields merged in), enabled, stored.
async fn add_rule(db: &TestDb, now: Millis, trigger_type: &str, extra: Value) -> RuleRow {
    let mut body = json!({
        "name": format!("rule for {trigger_type}"), "trigger_type": trigger_type, "channel": "inbox",
        "category": "news", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Hello", "text": "t"}}},
    });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let input: RuleInput = serde_json::from_value(body).unwrap();
    let row = input.into_row(now, &Default::default()).unwrap();
    db.store.insert_rule(&row).await.unwrap();
    row
}

fn planner_on(db: &TestDb, clock: &ManualClock) -> Planner {
    Planner::new(db.arc(), Arc::new(clock.clone()), Duration::from_secs(1), 100)
}

/// A trigger as a host application inserts it (unplanned), occurring at
/// `occurred_at`, then one planner sweep at `clock`'s time.
async fn host_trigger(
    db: &TestDb,
    clock: &ManualClock,
    trigger_type: &str,
    user_id: &str,
    occurred_at: Millis,
) -> String {
    let t = NewTrigger {
        id: herald::store::new_id(),
        trigger_type: trigger_type.into(),
        user_id: user(user_id),
        payload: json!({"n": occurred_at.0}),
        idempotency_key: None,
        request_hash: None,
        occurred_at,
    };
    db.store.insert_trigger(&t, clock.now()).await.unwrap();
    planner_on(db, clock).tick().await.unwrap();
    t.id
}

/// `herald sends` against the test's SQLite file.
fn herald_sends(db: &TestDb, user_id: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["sends", "--user-id", user_id, "--database-url", db.url.as_str()])
        .env_remove("HERALD_DATABASE_URL")
        .env("HERALD_LOG", "warn")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Item 23: a user whose only message is held by a send window was listed
/// with it, and then told "nothing was ever scheduled for user lena".
async fn herald_sends_with_only_a_held_message_does_not_say_nothing_was_scheduled() {
    let db = TestDb::new(Backend::Sqlite).await;
    // Wednesday 20:00 UTC, after the window's closing.
    let clock = ManualClock::at(at("2026-03-04T20:00:00Z"));
    add_rule(&db, clock.now(), "report", json!({"send_window": {"from": "09:00", "until": "18:00"}})).await;
    host_trigger(&db, &clock, "report", "lena", clock.now()).await;
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().held, 1);
    let text = herald_sends(&db, "lena");
    assert!(text.contains("not yet delivered (1):"), "{text}");
    assert!(text.contains("held until 2026-03-05T09:00:00.000Z"), "{text}");
    assert!(!text.contains("nothing was ever scheduled"), "{text}");
    assert!(text.contains("send log for user lena: no outcome yet"), "{text}");
    // A user with nothing at all still gets the plain answer.
    assert!(herald_sends(&db, "nobody").contains("nothing was ever scheduled for user nobody"));
    db.cleanup().await;
}

fn main() -> std::process::ExitCode {
    let trials = vec![common::harness::test(
        "cli::herald_sends_with_only_a_held_message_does_not_say_nothing_was_scheduled",
        herald_sends_with_only_a_held_message_does_not_say_nothing_was_scheduled,
    )];
    common::harness::main(trials)
}
