//! One clock for the fleet: a `herald serve` process
//! whose machine's clock runs an hour ahead (libfaketime, as `faketime -f
//! '+1h'` would) on the same database as another instance. Before Herald
//! timed everything by the database's clock, such an instance took back
//! every claim the other held (and delivered those rows twice), sent
//! 30-minute-delayed messages 30 minutes early and ended grace-window rows
//! `expired` a second after their trigger.
//!
//! The other instance is played by the test: it claims rows through the
//! store, as a live instance in the middle of delivering them would hold
//! them. PostgreSQL and MariaDB only: on SQLite every instance shares one
//! machine, and so one clock.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Backend, TestDb, row};
use herald::domain::OutboxStatus;
use herald::store::{RecipientStore, Store};

const EACH: usize = 30;

/// libfaketime's multi-threaded library, where Debian installs it.
fn libfaketime() -> Option<PathBuf> {
    ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|arch| PathBuf::from(format!("/usr/lib/{arch}/faketime/libfaketimeMT.so.1")))
        .find(|p| p.exists())
}

async fn an_instance_an_hour_ahead_takes_no_claim_sends_nothing_early_and_expires_nothing(backend: Backend) {
    let Some(lib) = libfaketime() else {
        if common::in_ci() {
            panic!("libfaketime is not installed (apt package faketime); .ci/run installs it");
        }
        common::harness::skip("needs libfaketime: apt-get install faketime")
    };
    let db = TestDb::new(backend).await;
    let (_, api_key) = herald::http::auth::generate("tests", herald::clock::Clock::now(&herald::clock::SystemClock));
    db.store.insert_api_key(&api_key).await.unwrap();
    let now = db.store.database_time().await.unwrap();

    // Rows another instance has claimed and is delivering right now.
    let held: Vec<_> = (0..EACH).map(|i| row(&format!("held-{i}"), "inbox", now)).collect();
    db.store.enqueue(&held, now).await.unwrap();
    assert_eq!(
        db.store.claim_channel("inbox", now, EACH as u32, "held-by-the-other-instance").await.unwrap().len(),
        EACH
    );
    // Delayed by 30 minutes; due now with a 10-minute grace window; due now.
    let delayed: Vec<_> =
        (0..EACH).map(|i| row(&format!("delayed-{i}"), "inbox", now.plus(Duration::from_secs(1800)))).collect();
    let graced: Vec<_> = (0..EACH)
        .map(|i| {
            let mut r = row(&format!("graced-{i}"), "inbox", now);
            r.expires_at = Some(now.plus(Duration::from_secs(600)));
            r
        })
        .collect();
    let plain: Vec<_> = (0..EACH).map(|i| row(&format!("plain-{i}"), "inbox", now)).collect();
    for rows in [&delayed, &graced, &plain] {
        db.store.enqueue(rows, now).await.unwrap();
    }

    let log_dir = tempfile::tempdir().unwrap();
    let env = [
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("FAKETIME", "+1h"),
        ("HERALD_WORKER__POLL", "1s"),
        ("HERALD_EMAIL__ADDRESS_SECRET", "skew test secret, not for production"),
        ("HERALD_INBOX__TOKEN_SECRET", "skew test token secret, at least 32 chars"),
    ];
    let mut ahead = common::start_cluster(
        db.url.clone(),
        1,
        log_dir.path().to_owned(),
        env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
    )
    .await;

    // It delivers what is due (so its worker, and the stale reclaim that
    // runs first when the worker starts, have run).
    let status_of = |rows: &[herald::store::NewOutboxRow]| {
        let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let store = db.store.clone();
        async move {
            let mut out = Vec::new();
            for id in ids {
                out.push(store.get_outbox(&id).await.unwrap().unwrap());
            }
            out
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done =
            status_of(&plain).await.iter().chain(status_of(&graced).await.iter()).all(|r| r.status.is_terminal());
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "the instance did not deliver the due rows within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = ahead.log(0);
    assert!(
        log.contains("clock differs from the database"),
        "the instance's clock was not an hour ahead (libfaketime not in effect?): {log}"
    );

    for r in status_of(&plain).await {
        assert_eq!(r.status, OutboxStatus::Sent);
    }
    for r in status_of(&graced).await {
        assert_eq!(r.status, OutboxStatus::Sent, "ended {} within its grace window: {:?}", r.status, r.last_error);
    }
    for r in status_of(&delayed).await {
        assert_eq!(r.status, OutboxStatus::Scheduled, "a message due in 30 minutes was not sent early");
    }
    for r in status_of(&held).await {
        assert_eq!(r.status, OutboxStatus::Sending, "the other instance's claim was not taken back");
        assert_eq!(r.claim_token.as_deref(), Some("held-by-the-other-instance"));
        assert_eq!(r.attempts, 1, "not claimed a second time");
    }
    let unclean = ahead.stop(Duration::from_secs(30)).await;
    assert!(unclean.is_empty(), "{unclean:?}");
    db.cleanup().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(vec![
        common::harness::test("postgres::an_instance_an_hour_ahead_takes_no_claim_sends_nothing_early", || {
            an_instance_an_hour_ahead_takes_no_claim_sends_nothing_early_and_expires_nothing(Backend::Postgres)
        }),
        common::harness::test("mysql::an_instance_an_hour_ahead_takes_no_claim_sends_nothing_early", || {
            an_instance_an_hour_ahead_takes_no_claim_sends_nothing_early_and_expires_nothing(Backend::MySql)
        }),
    ])
}
