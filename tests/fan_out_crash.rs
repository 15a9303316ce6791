//! A `herald serve` killed (SIGKILL) half-way through expanding a trigger to
//! a topic of 100,000, on PostgreSQL and MariaDB (and SQLite): a second
//! `herald serve` takes the expansion over once the first one's lease has
//! passed and finishes it, and every subscriber has exactly one message.
//!
//! Real processes, not an expander told to stop: the kill lands wherever
//! the first process is, mid-chunk included, and nothing of it runs after.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Backend, TestDb, add_rule};
use herald::clock::{Clock, SystemClock};
use herald::store::{Audience, FanOutStore, NewFanOut, Store};
use sqlx::Row;

const SUBSCRIBERS: usize = 100_000;

fn main() -> std::process::ExitCode {
    common::harness::main(per_backend_tests![a_killed_expander_is_finished_by_another_process_each_subscriber_once])
}

/// A `herald serve` that is killed (SIGKILL) when dropped, so a failed
/// assertion leaves no process behind.
struct Serve(Child);

impl Serve {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

fn serve(db: &TestDb) -> Serve {
    let child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("HERALD_DATABASE_URL", &db.url)
        .env("HERALD_LOG", "warn")
        // Expanding only: no delivery, so the count is the expansion's.
        .env("HERALD_WORKER__ENABLED", "false")
        .env("HERALD_PLANNER__POLL", "50ms")
        // Small chunks, many of them: the kill lands half-way.
        .env("HERALD_PLANNER__FAN_OUT_CHUNK", "1000")
        .env("HERALD_PLANNER__FAN_OUT_LEASE", "3s")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("herald serve starts");
    Serve(child)
}

async fn subscribe_many(db: &TestDb, topic: &str, n: usize) {
    for first in (0..n).step_by(1000) {
        let count = (n - first).min(1000);
        let values = vec!["(?, ?, ?)"; count].join(", ");
        let sql = db.store.dialect().sql(&format!(
            "INSERT INTO engagement_topic_subscriptions (topic_key, user_id, created_at) VALUES {values}"
        ));
        let mut q = sqlx::query(&sql);
        for i in first..first + count {
            q = q.bind(topic.to_owned()).bind(format!("u{i:06}")).bind(0i64);
        }
        q.execute(db.store.pool()).await.unwrap();
    }
}

async fn a_killed_expander_is_finished_by_another_process_each_subscriber_once(backend: Backend) {
    let db = TestDb::new(backend).await;
    let now = SystemClock.now();
    add_rule(&db, now, "release.announced", serde_json::json!({})).await;
    subscribe_many(&db, "product:herald", SUBSCRIBERS).await;
    let trigger = NewFanOut {
        id: "t-crash".into(),
        trigger_type: "release.announced".into(),
        audience: Audience::Topic("product:herald".into()),
        actor_id: None,
        payload: serde_json::json!({"version": "2.0"}),
        idempotency_key: None,
        request_hash: None,
        occurred_at: now,
        send_at: None,
    };
    db.store.record_fan_out(&trigger, now).await.unwrap();

    let mut first = serve(&db);
    let deadline = Instant::now() + Duration::from_secs(120);
    let at_kill = loop {
        let state = db.store.fan_out_state("t-crash").await.unwrap().unwrap();
        if state.expanded_count >= 20_000 {
            first.kill(); // SIGKILL
            break db.store.fan_out_state("t-crash").await.unwrap().unwrap();
        }
        assert!(Instant::now() < deadline, "the first process did not get a fifth of the way: {state:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(at_kill.planned_at.is_none(), "killed before it finished: {at_kill:?}");
    assert!(at_kill.expanded_count < SUBSCRIBERS as i64, "{at_kill:?}");
    assert!(at_kill.expand_owner.is_some(), "the dead process still holds the lease");

    let mut second = serve(&db);
    let deadline = Instant::now() + Duration::from_secs(180);
    let done = loop {
        let state = db.store.fan_out_state("t-crash").await.unwrap().unwrap();
        if state.planned_at.is_some() {
            break state;
        }
        assert!(Instant::now() < deadline, "the second process did not finish: {state:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    second.kill();
    assert_eq!((done.expanded_count, done.planned_count), (SUBSCRIBERS as i64, Some(SUBSCRIBERS as i64)), "{done:?}");
    let sql = db
        .store
        .dialect()
        .sql("SELECT COUNT(*) AS n, COUNT(DISTINCT user_id) AS users FROM engagement_outbox WHERE trigger_id = ?");
    let row = sqlx::query(&sql).bind("t-crash").fetch_one(db.store.pool()).await.unwrap();
    let (n, users): (i64, i64) = (row.try_get("n").unwrap(), row.try_get("users").unwrap());
    assert_eq!((n, users), (SUBSCRIBERS as i64, SUBSCRIBERS as i64), "every subscriber exactly once");
    db.cleanup().await;
}
