//! The planner on each backend: the transactional-outbox contract (a host
//! application inserts a bare row in its own transaction), several
//! planners at once never doubling a message, and a rule disabled through
//! an instance no longer planned by it, even by a read of the rules that
//! was in flight when it changed.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestDb, user};
use herald::clock::{Clock, Millis, SystemClock};
use herald::planning::planner::{Planner, RuleBook};
use herald::planning::rule::RuleInput;
use herald::store::{CancelScope, RuleRow, RuleStore, Store, StoreError, TriggerStore};

backend_tests!(
    a_row_the_host_inserts_itself_is_planned_by_the_sweep,
    concurrent_planners_plan_each_trigger_once,
    a_rule_read_in_flight_when_it_was_disabled_is_not_kept,
);

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
            send_at: None,
            actor_id: None,
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

/// The store, but its first read of the enabled rules, once it has read
/// them, waits for the test to say go: the window in which a rule is
/// disabled and the book invalidated.
struct HeldRead {
    store: herald::store::SqlStore,
    read: tokio::sync::Notify,
    go: tokio::sync::Notify,
    first: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl RuleStore for HeldRead {
    async fn insert_rule(&self, rule: &RuleRow) -> Result<(), StoreError> {
        self.store.insert_rule(rule).await
    }
    async fn get_rule(&self, id: &str) -> Result<Option<RuleRow>, StoreError> {
        self.store.get_rule(id).await
    }
    async fn list_rules(&self) -> Result<Vec<RuleRow>, StoreError> {
        self.store.list_rules().await
    }
    async fn update_rule(&self, rule: &RuleRow) -> Result<bool, StoreError> {
        self.store.update_rule(rule).await
    }
    async fn delete_rule(&self, id: &str) -> Result<bool, StoreError> {
        self.store.delete_rule(id).await
    }
    async fn enabled_rules(&self) -> Result<Vec<RuleRow>, StoreError> {
        let rules = self.store.enabled_rules().await?;
        if self.first.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.read.notify_one();
            self.go.notified().await;
        }
        Ok(rules)
    }
    async fn rule_versions(&self, ids: &[&str]) -> Result<Vec<(String, bool, Millis)>, StoreError> {
        self.store.rule_versions(ids).await
    }
    async fn rules_by_ids(&self, ids: &[&str]) -> Result<Vec<RuleRow>, StoreError> {
        self.store.rules_by_ids(ids).await
    }
    async fn cancel_scheduled(&self, scope: CancelScope<'_>, detail: &str, now: Millis) -> Result<u64, StoreError> {
        self.store.cancel_scheduled(scope, detail, now).await
    }
}

/// A read of the rules that began before a rule was disabled
/// (and the book invalidated) stored its copy afterwards, and the instance
/// went on planning the disabled rule for up to a second (147 rows on
/// PostgreSQL, all cancelled at delivery). The read still answers the
/// trigger that raced the change; it is no longer kept.
async fn a_rule_read_in_flight_when_it_was_disabled_is_not_kept(db: &TestDb) {
    let mut rule = enabled_rule("invoice.due");
    db.store.insert_rule(&rule).await.unwrap();
    let held = Arc::new(HeldRead {
        store: db.store.clone(),
        read: Default::default(),
        go: Default::default(),
        first: true.into(),
    });
    let book = Arc::new(RuleBook::reading_from(db.arc(), held.clone()));
    let in_flight = tokio::spawn({
        let book = book.clone();
        async move { book.current().await.unwrap().rules_for("invoice.due").len() }
    });
    held.read.notified().await;
    // What `PATCH /v1/rules/{id} {"enabled": false}` does, in its order.
    rule.enabled = false;
    assert!(db.store.update_rule(&rule).await.unwrap());
    book.invalidate();
    held.go.notify_one();
    assert_eq!(in_flight.await.unwrap(), 1, "the read that raced the change saw the rule on");

    assert!(book.current().await.unwrap().rules_for("invoice.due").is_empty(), "the disabled rule is not kept");
    let planner = Planner::with_rules(db.arc(), Arc::new(SystemClock), book, Duration::from_millis(50), 100);
    let trigger = herald::store::NewTrigger {
        id: "after-disable".into(),
        trigger_type: "invoice.due".into(),
        user_id: user("u"),
        payload: serde_json::json!({}),
        idempotency_key: None,
        request_hash: None,
        occurred_at: SystemClock.now(),
        send_at: None,
        actor_id: None,
    };
    db.store.insert_trigger(&trigger, SystemClock.now()).await.unwrap();
    assert_eq!(planner.tick().await.unwrap(), 1);
    assert!(db.store.outbox_for_trigger("after-disable").await.unwrap().is_empty(), "nothing planned by it");
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
