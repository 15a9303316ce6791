//! Database faults: two `herald serve` processes drain an outbox while the
//! database server is stopped and started again, and then while every one of
//! their connections is cut. Herald must log the failure, answer `/readyz`
//! with 503 while the database is away (and promptly: a probe that hangs is
//! not an answer), reconnect by itself and finish with nothing lost and
//! nothing doubled in the inbox.
//!
//! Each test runs its own PostgreSQL or MariaDB server (see
//! `chaos_support`), never the shared ones. Run only on request
//! (`harness::on_request`, like `#[ignore]`) because it takes about a
//! minute; `.ci/run` runs it:
//!
//! ```sh
//! cargo test --test db_faults -- --ignored --test-threads 1 --nocapture
//! ```
//!
//! The rows fall due spread over `SPREAD`, so "mid-drain" is not a race the
//! test might lose: whenever the fault comes, rows are still falling due.

mod chaos_support;
mod common;

use std::time::{Duration, Instant};

use chaos_support::{PrivateMariaDb, PrivatePostgres, knob, output_dir, wait_for};
use herald::clock::{Clock, SystemClock};
use herald::store::{ConnectOptions, NewOutboxRow, SqlStore, Store};
use herald::tooling::cluster::{self, Cluster};

const SPREAD: Duration = Duration::from_secs(20);

enum Server {
    Postgres(PrivatePostgres),
    MariaDb(PrivateMariaDb),
}

impl Server {
    fn url(&self) -> String {
        match self {
            Server::Postgres(s) => s.url(),
            Server::MariaDb(s) => s.url(),
        }
    }

    async fn stop(&mut self) {
        match self {
            Server::Postgres(s) => s.stop(),
            Server::MariaDb(s) => s.stop().await,
        }
    }

    async fn start(&mut self) {
        match self {
            Server::Postgres(s) => s.start_again(),
            Server::MariaDb(s) => s.start_again().await,
        }
    }

    async fn cut_connections(&self) -> i64 {
        match self {
            Server::Postgres(s) => s.cut_connections().await,
            Server::MariaDb(s) => s.cut_connections().await,
        }
    }
}

/// `rows` inbox rows keyed `PREFIX:i`, falling due evenly over [`SPREAD`].
async fn enqueue_spread(store: &SqlStore, prefix: &str, rows: usize) {
    let clock = SystemClock;
    let now = clock.now();
    let step = SPREAD.as_millis() as i64 / rows.max(1) as i64;
    let rows: Vec<NewOutboxRow> = (0..rows)
        .map(|i| {
            let payload = serde_json::json!({ "title": format!("{prefix} {i}") });
            let due = herald::clock::Millis(now.0 + step * i as i64);
            common::keyed_row("fault-user", "inbox", format!("{prefix}:{i}"), payload, due)
        })
        .collect();
    for chunk in rows.chunks(1000) {
        store.enqueue(chunk, clock.now()).await.unwrap();
    }
}

async fn sent(store: &SqlStore) -> i64 {
    cluster::audit(store.pool()).await.map_or(0, |a| a.by_status.get("sent").copied().unwrap_or(0))
}

/// `/readyz` of every instance: the codes, and the slowest answer.
async fn readyz_all(cluster: &Cluster) -> (Vec<Option<u16>>, Duration) {
    let mut codes = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..cluster.len() {
        let t = Instant::now();
        codes.push(cluster.readyz(i).await);
        slowest = slowest.max(t.elapsed());
    }
    (codes, slowest)
}

fn assert_clean(audit: &cluster::Audit, rows: i64, log_dir: &std::path::Path) {
    assert_eq!(audit.violations(), Vec::<String>::new(), "{audit:?}; logs in {}", log_dir.display());
    assert_eq!(audit.rows, rows);
    assert_eq!(audit.by_status.get("sent").copied(), Some(rows), "{:?}", audit.by_status);
    assert_eq!(audit.inbox_sent, rows);
}

async fn faults(mut server: Server, name: &str) {
    let rows = knob("HERALD_TEST_FAULT_ROWS", 2000) as usize;
    let log_dir = output_dir(&format!("db-faults/{name}"));
    let store =
        SqlStore::connect(&server.url(), &ConnectOptions { max_connections: 2, ..Default::default() }).await.unwrap();
    store.migrate().await.unwrap();
    let env = [
        ("HERALD_WORKER__POLL", "1s"),
        ("HERALD_WORKER__STALE", "6s"),
        ("HERALD_WORKER__DELIVER_TIMEOUT", "3s"),
        ("HERALD_WORKER__RETRY", "1s"),
        ("HERALD_WEBHOOK__TIMEOUT", "2s"),
        ("HERALD_EMAIL__TIMEOUT", "2s"),
        ("HERALD_EMAIL__ADDRESS_SECRET", "fault test secret, not for production"),
        ("HERALD_INBOX__TOKEN_SECRET", "fault test token secret, at least 32 chars"),
    ];
    let mut cluster = common::start_cluster(
        server.url(),
        2,
        log_dir.clone(),
        env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
    )
    .await;

    // 1. The server stops mid-drain and comes back.
    enqueue_spread(&store, "restart", rows).await;
    let tenth = rows as i64 / 10;
    let st = &store;
    wait_for("a tenth of the rows to be sent", Duration::from_secs(60), || async move { sent(st).await >= tenth })
        .await;
    let before = sent(&store).await;
    server.stop().await;
    let down = Instant::now();
    eprintln!("{name}: database stopped with {before} of {rows} rows sent");
    let mut slowest = Duration::ZERO;
    loop {
        let (codes, t) = readyz_all(&cluster).await;
        slowest = slowest.max(t);
        if codes.iter().all(|c| *c == Some(503)) {
            break;
        }
        assert!(down.elapsed() < Duration::from_secs(30), "/readyz still says {codes:?} 30s after the database went");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(slowest < Duration::from_secs(5), "/readyz took {slowest:?} to answer while the database was away");
    // A lane whose deliveries finished just before the outage keeps their
    // outcomes until the database answers (and says so, the worker's
    // wording in `record_group`) and reads nothing new until one of its
    // batches is recorded, so it may never get to a failing sweep.
    wait_for("every instance to log the database failure", Duration::from_secs(60), || {
        let logs: Vec<String> = (0..cluster.len()).map(|i| cluster.log(i)).collect();
        async move {
            logs.iter().all(|l| {
                l.contains("outbox sweep failed")
                    || l.contains("could not record a group of outcomes; keeping them until the database answers")
            })
        }
    })
    .await;
    cluster.check_all_alive().unwrap();
    let outage = Duration::from_secs(5).saturating_sub(down.elapsed());
    tokio::time::sleep(outage).await;
    server.start().await;
    eprintln!("{name}: database back after {:?}", down.elapsed());
    for i in 0..cluster.len() {
        cluster.wait_ready(i).await.unwrap();
    }
    let took = cluster::wait_drained(store.pool(), Duration::from_secs(120)).await.unwrap();
    cluster.check_all_alive().unwrap();
    let audit = cluster::audit(store.pool()).await.unwrap();
    eprintln!("{name}: after the restart, drained {took:?} after the server was back: {audit:?}");
    assert_clean(&audit, rows as i64, &log_dir);

    // 2. Every connection cut, three times, mid-drain.
    enqueue_spread(&store, "cut", rows).await;
    let target = rows as i64 + tenth;
    wait_for("a tenth of the new rows to be sent", Duration::from_secs(60), || async move { sent(st).await >= target })
        .await;
    let mut cut = 0;
    for _ in 0..3 {
        cut += server.cut_connections().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("{name}: cut {cut} connections");
    assert!(cut > 0, "no connection was cut");
    let took = cluster::wait_drained(store.pool(), Duration::from_secs(120)).await.unwrap();
    cluster.check_all_alive().unwrap();
    let audit = cluster::audit(store.pool()).await.unwrap();
    eprintln!("{name}: after the cuts, drained {took:?} later: {audit:?}");
    assert_clean(&audit, 2 * rows as i64, &log_dir);
    for i in 0..cluster.len() {
        assert_eq!(cluster.starts(i), 1, "instance {i} was never restarted: it reconnected by itself");
    }

    let unclean = cluster.stop(Duration::from_secs(30)).await;
    assert!(unclean.is_empty(), "instances did not stop cleanly: {unclean:?}");
    store.close().await;
}

async fn postgres_restart_and_connection_cuts() {
    let Some(pg) = PrivatePostgres::start() else {
        common::harness::skip(
            "needs the PostgreSQL server binaries under /usr/lib/postgresql/*/bin: apt-get install postgresql",
        )
    };
    faults(Server::Postgres(pg), "postgres").await;
}

async fn mariadb_restart_and_connection_cuts() {
    let Some(db) = PrivateMariaDb::start().await else {
        common::harness::skip("needs /usr/sbin/mariadbd: apt-get install mariadb-server")
    };
    faults(Server::MariaDb(db), "mariadb").await;
}

fn main() -> std::process::ExitCode {
    use common::harness::on_request;
    const WHY: &str = "starts and stops its own database server, about a minute";
    common::harness::main(vec![
        on_request("postgres_restart_and_connection_cuts", WHY, postgres_restart_and_connection_cuts),
        on_request("mariadb_restart_and_connection_cuts", WHY, mariadb_restart_and_connection_cuts),
    ])
}
