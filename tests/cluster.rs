//! The chaos harness's own checks: the audit names each broken invariant on
//! every backend (a harness that cannot fail proves nothing), and
//! `herald bench --instances` drains with real processes.

mod common;

use std::process::Command;

use common::{T0, TestDb, row};
use herald::store::{Store, new_id};
use herald::tooling::cluster::audit;

async fn audit_names_each_broken_invariant(db: &TestDb) {
    let store = &db.store;
    let clean = audit(store.pool()).await.unwrap();
    assert_eq!(clean.rows, 0);
    assert!(clean.violations().is_empty(), "{clean:?}");

    let (a, b, c) = (row("u-1", "inbox", T0), row("u-1", "inbox", T0), row("u-1", "inbox", T0));
    store.enqueue(&[a.clone(), b.clone(), c.clone()], T0).await.unwrap();
    // One row left claimed, as a killed instance leaves it.
    let claimed = store.claim_channel("inbox", T0, 1, &new_id()).await.unwrap();
    assert_eq!(claimed.len(), 1);
    // One row marked sent behind the worker's back: no send-log row, no message.
    let other = [&a, &b, &c].into_iter().find(|r| r.id != claimed[0].id).unwrap().id.clone();
    sqlx::query(&store.dialect().sql("UPDATE engagement_outbox SET status = 'sent' WHERE id = ?"))
        .bind(other.clone())
        .execute(store.pool())
        .await
        .unwrap();
    // A message for the row still scheduled, written behind the worker's
    // back (Herald writes one only with its `sent` outcome): the user has
    // what the log denies.
    let third = [&a, &b, &c].into_iter().find(|r| r.id != claimed[0].id && r.id != other).unwrap();
    let insert = "INSERT INTO engagement_inbox (id, position, outbox_id, user_id, title, created_at) \
                  VALUES (?, ?, ?, ?, ?, ?)";
    sqlx::query(&store.dialect().sql(insert))
        .bind(new_id())
        .bind(1_000_000_i64)
        .bind(third.id.clone())
        .bind("u-1")
        .bind("hello")
        .bind(T0.0)
        .execute(store.pool())
        .await
        .unwrap();

    let broken = audit(store.pool()).await.unwrap();
    assert_eq!(broken.rows, 3);
    assert_eq!((broken.non_terminal, broken.without_outcome), (2, 1), "{broken:?}");
    assert_eq!((broken.inbox_missing, broken.inbox_unaccounted), (1, 1), "{broken:?}");
    assert_eq!(
        broken.violations(),
        vec![
            "2 rows are still scheduled or sending",
            "1 terminal rows have no send-log row",
            "1 sent inbox rows have no inbox message",
            "1 inbox messages belong to no sent outbox row",
        ]
    );
}

/// A text's delivery reports are later send-log rows for a `sent` row, not
/// a second outcome: the audit passes them, and still names a second `sent`.
async fn delivery_reports_are_not_extra_outcomes(db: &TestDb) {
    use herald::store::Finish;
    let store = &db.store;
    let r = row("u-1", "sms", T0);
    store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let claimed = store.claim_channel("sms", T0, 1, "t").await.unwrap().remove(0);
    assert!(store.finish(&claimed, "t", &Finish::sent("sms"), T0).await.unwrap());
    let log = |status: &'static str| {
        let sql = store.dialect().sql(
            "INSERT INTO engagement_sends (id, outbox_id, user_id, channel, status, attempts, created_at) \
             VALUES (?, ?, 'u-1', 'sms', ?, 0, ?)",
        );
        let id = r.id.clone();
        async move { sqlx::query(&sql).bind(new_id()).bind(id).bind(status).bind(T0.0).execute(store.pool()).await }
    };
    log("delivered").await.unwrap();
    log("undelivered").await.unwrap();
    let clean = audit(store.pool()).await.unwrap();
    assert!(clean.violations().is_empty(), "{clean:?}");
    log("sent").await.unwrap();
    let broken = audit(store.pool()).await.unwrap();
    assert_eq!((broken.extra_outcomes, broken.mismatched_outcome), (1, 0), "{broken:?}");
}

backend_tests!(audit_names_each_broken_invariant, delivery_reports_are_not_extra_outcomes);

fn bench_with_instances_drains_with_real_processes_and_reports_latency() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_herald"))
        .current_dir(dir.path())
        .args(["bench", "--instances", "2", "--rows", "300", "--json"])
        .env("HERALD_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["database"], "sqlite");
    assert_eq!(r["instances"], 2);
    assert_eq!(r["sent"], 300);
    assert_eq!(r["not_sent"], 0);
    assert!(r["drain_rows_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["latency_p99_ms"].as_i64().unwrap() >= r["latency_p50_ms"].as_i64().unwrap(), "{r}");
}

fn main() -> std::process::ExitCode {
    let mut trials = backend_trials();
    trials.extend(named_tests![
        #[sync]
        bench_with_instances_drains_with_real_processes_and_reports_latency,
    ]);
    common::harness::main(trials)
}
