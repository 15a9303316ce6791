//! The planner on each backend: the transactional-outbox contract (a host
//! application inserts a bare row in its own transaction) and several
//! planners at once never doubling a message.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestDb, user};
use herald::clock::{Clock, SystemClock};
use herald::planning::planner::Planner;
use herald::planning::rule::RuleInput;
use herald::store::{RuleStore, Store, TriggerStore};

backend_tests!(a_row_the_host_inserts_itself_is_planned_by_the_sweep, concurrent_planners_plan_each_trigger_once,);

fn enabled_rule(trigger_type: &str) -> herald::store::RuleRow {
    let input: RuleInput = serde_json::from_value(serde_json::json!({
        "name": "r", "trigger_type": trigger_type, "channel": "inbox", "category": "c", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}}
    }))
    .unwrap();
    input.into_row(SystemClock.now(), &Default::default()).unwrap()
}

fn planner(store: Arc<dyn Store>) -> Planner {
    Planner::new(store, Arc::new(SystemClock), Duration::from_millis(50), 100)
}

async fn a_row_the_host_inserts_itself_is_planned_by_the_sweep(db: &TestDb) {
    db.store.insert_rule(&enabled_rule("order.shipped")).await.unwrap();
    // Exactly what the README documents a host application may write:
    // id, type, user_id, payload; occurred_at and created_at default to now.
    let mut tx = db.store.pool().begin().await.unwrap();
    let sql = herald::store::Dialect::sql(
        db.store.dialect(),
        "INSERT INTO engagement_triggers (id, type, user_id, payload) VALUES (?, ?, ?, ?)",
    );
    sqlx::query(&sql)
        .bind("host-1")
        .bind("order.shipped")
        .bind("u-host")
        .bind(r#"{"order": 42}"#)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let before = SystemClock.now();
    let t = db.store.get_trigger("host-1").await.unwrap().unwrap();
    assert!(t.planned_at.is_none());
    assert!((before.0 - t.occurred_at.0).abs() < 60_000, "occurred_at defaults to now: {:?}", t.occurred_at);

    assert_eq!(planner(db.arc()).tick().await.unwrap(), 1);
    let rows = db.store.outbox_for_trigger("host-1").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].user_id, "u-host");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&rows[0].payload).unwrap()["order"], 42);
    assert_eq!(planner(db.arc()).tick().await.unwrap(), 0, "planned once");
    assert!(db.store.pending_for_user(&user("u-host"), 10).await.unwrap().len() == 1);
}

async fn concurrent_planners_plan_each_trigger_once(db: &TestDb) {
    db.store.insert_rule(&enabled_rule("burst")).await.unwrap();
    db.store.insert_rule(&enabled_rule("burst")).await.unwrap();
    for i in 0..40 {
        let t = herald::store::NewTrigger {
            id: format!("t{i}"),
            trigger_type: "burst".into(),
            user_id: user("u"),
            payload: serde_json::json!({}),
            idempotency_key: None,
            request_hash: None,
            occurred_at: SystemClock.now(),
        };
        db.store.insert_trigger(&t, SystemClock.now()).await.unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let store: Arc<dyn Store> = Arc::new(db.another_instance().await);
        tasks.spawn(async move { planner(store).tick().await.unwrap() });
    }
    let mut planned = 0;
    while let Some(n) = tasks.join_next().await {
        planned += n.unwrap();
    }
    assert_eq!(planned, 40, "each trigger planned by exactly one planner");
    let summary = db.store.status_summary(SystemClock.now()).await.unwrap();
    assert_eq!(summary.count(herald::domain::OutboxStatus::Scheduled), 80, "two rules × 40 triggers, no doubles");
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
