//! The HTTP surface of `serve`: health, readiness and metrics.

mod common;

use std::time::Duration;

use common::{Backend, TestDb, row};
use herald::clock::{Clock, SystemClock};
use herald::config::Config;
use herald::store::Store;
use tokio_util::sync::CancellationToken;

struct Running {
    base: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn serve(db: &TestDb) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut config = Config { database_url: db.url.clone(), ..Config::default() };
    config.email.address_secret = Some("a test secret of sufficient length".into());
    config.worker.poll = Duration::from_secs(3600);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(herald::app::serve_until(config, db.store.clone(), listener, shutdown.clone()));
    Running { base, shutdown, task }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics() {
    let db = TestDb::new(Backend::Sqlite).await;
    db.store
        .enqueue(&[row("u1", "inbox", SystemClock.now()), row("u1", "email", SystemClock.now())], SystemClock.now())
        .await
        .unwrap();
    let app = serve(&db).await;
    let http = reqwest::Client::new();

    let health = http.get(format!("{}/healthz", app.base)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = http.get(format!("{}/readyz", app.base)).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    // The worker wakes on start and delivers both rows (one sent, one failed).
    let mut metrics = String::new();
    for _ in 0..200 {
        metrics = http.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        if metrics.contains("herald_outbox_rows{status=\"sent\"} 1") && metrics.contains("status=\"failed\"} 1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for expected in [
        "herald_outbox_rows{status=\"scheduled\"} 0",
        "herald_outbox_rows{status=\"sent\"} 1",
        "herald_outbox_rows{status=\"failed\"} 1",
        "herald_deliveries_total{channel=\"inbox\",outcome=\"sent\"} 1",
        "herald_deliveries_total{channel=\"email\",outcome=\"failed\"} 1",
        "herald_claim_latency_seconds_count 2",
        "# TYPE herald_claim_latency_seconds histogram",
    ] {
        assert!(metrics.contains(expected), "missing {expected:?} in:\n{metrics}");
    }

    app.shutdown.cancel();
    app.task.await.unwrap().unwrap();
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_not_ready_while_the_database_is_away() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = serve(&db).await;
    let http = reqwest::Client::new();
    assert_eq!(http.get(format!("{}/readyz", app.base)).send().await.unwrap().status(), 200);
    db.store.pool().close().await; // the database goes away
    let resp = http.get(format!("{}/readyz", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.text().await.unwrap().contains("database unreachable"));
    assert_eq!(http.get(format!("{}/healthz", app.base)).send().await.unwrap().status(), 200, "still alive");
    app.shutdown.cancel();
    app.task.await.unwrap().unwrap();
}
