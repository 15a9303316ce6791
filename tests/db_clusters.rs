//! Herald on real database clusters, started by the scripts in `cluster/`:
//! a 3-node MariaDB Galera cluster behind HAProxy with three `herald serve`
//! processes, and a 2-node Patroni PostgreSQL cluster (synchronous mode)
//! behind HAProxy with two. Each drains inbox rows, and then emails (one
//! rule, one user each, triggers posted through the API to the instances
//! in turn) to an SMTP server that takes 2 s per message (so emails are in
//! flight); a database node is SIGKILLed 3 s after the last trigger (on
//! Patroni: the leader's Patroni and postmaster). With the default worker
//! settings every row must be `sent` within 120 s of the kill, no API answer
//! a 5xx, no inbox message doubled, no email received twice, no instance
//! restarted, and no ERROR line logged for a lost race.
//!
//! Run only on request (they take a few minutes and use fixed ports, so one
//! at a time), as root (the scripts run the servers as users mysql and
//! postgres):
//!
//! ```sh
//! cargo test --test db_clusters -- --ignored --test-threads 1 --nocapture
//! ```
//!
//! A third test shows what synchronous replication is for: Patroni in
//! asynchronous mode (`cluster/patroni.sh up --async`), the primary's WAL
//! senders held (`patroni.sh lag on`) for `HERALD_TEST_ASYNC_LAG_SECS`
//! (default 8; 0 leaves replication alone) while emails and inbox rows are
//! delivered, then the leader SIGKILLed and the standby promoted. It
//! asserts what still holds (every row `sent` in the end, exactly one
//! outcome and at most one inbox message per row, every email received, none
//! more than twice) and counts what the promoted standby lost: outcomes the
//! old primary had committed, and so messages delivered again.
//!
//! A test whose packages are missing (patroni, etcd-server, haproxy,
//! galera-4, mariadb-server) ends ignored, naming them. Knobs:
//! `HERALD_TEST_CLUSTER_INBOX_ROWS` (default 10000) and
//! `HERALD_TEST_CLUSTER_EMAILS` (default 300).

mod chaos_support;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chaos_support::{knob, output_dir};
use common::smtp::SmtpSink;
use herald::clock::{Clock, SystemClock};
use herald::store::{ConnectOptions, NewOutboxRow, SqlStore};
use herald::tooling::cluster::{self, Cluster};

const BOUND: Duration = Duration::from_secs(120);

/// One of the `cluster/` scripts, run with a data directory of its own;
/// stopped (and its data removed) when dropped.
struct Script {
    path: PathBuf,
    dir_var: &'static str,
    dir: PathBuf,
}

impl Script {
    fn new(name: &str, dir_var: &'static str) -> Script {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster").join(name);
        let dir = std::env::temp_dir().join(format!("herald-test-{}", name.trim_end_matches(".sh")));
        Script { path, dir_var, dir }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("bash")
            .arg(&self.path)
            .args(args)
            .env(self.dir_var, &self.dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.path.display()));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.code() == Some(3) {
            common::harness::skip(text.trim().to_owned());
        }
        assert!(out.status.success(), "{} {args:?} failed:\n{text}", self.path.display());
        text
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(&self.path).args(["stop", "--clean"]).env(self.dir_var, &self.dir).output();
    }
}

/// `inbox` inbox rows for one user, due `due_in` from now, their dedupe
/// keys and titles marked with `tag`.
async fn enqueue_inbox(store: &SqlStore, inbox: usize, tag: &str, due_in: Duration) {
    let now = SystemClock.now();
    let due = herald::clock::Millis(now.0 + due_in.as_millis() as i64);
    let rows: Vec<NewOutboxRow> = (0..inbox)
        .map(|i| {
            let payload = serde_json::json!({ "title": format!("{tag} {i}") });
            common::keyed_row("cluster-user", "inbox", format!("{tag}:{i}"), payload, due)
        })
        .collect();
    common::enqueue_all(store, &rows, now).await;
}

/// One email rule, `emails` users with an address each, and one trigger per
/// user posted through the API (to the instances in turn). Returns the
/// status of every trigger's answer.
async fn post_email_triggers(store: &SqlStore, herald: &Cluster, emails: usize) -> Vec<u16> {
    use herald::store::RecipientStore;
    let (key, row) = herald::http::auth::generate("db-clusters", SystemClock.now());
    store.insert_api_key(&row).await.unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let call = |i: usize, method: reqwest::Method, path: String, body: serde_json::Value| {
        let req = http.request(method, format!("{}{path}", herald.base_url(i % herald.len()))).bearer_auth(&key);
        async move { req.json(&body).send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
    };
    let rule = serde_json::json!({
        "name": "cluster mail", "trigger_type": "cluster.mail", "channel": "email", "category": "cluster",
        "delay": 0, "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Hello", "text": "Hello from the cluster"}}}
    });
    // The key was written through one connection (one Galera node); the
    // instance may read it on another node that has not applied it yet
    // (Galera's reads are not causal by default): ask again for a moment.
    let mut status = 0;
    for _ in 0..50 {
        status = call(0, reqwest::Method::POST, "/v1/rules".into(), rule.clone()).await;
        if status != 401 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 201);
    for i in 0..emails {
        let user = serde_json::json!({ "email": format!("slow{i}@cluster.test") });
        let status = call(i, reqwest::Method::PUT, format!("/v1/users/u{i}"), user).await;
        assert!(status == 201 || status == 200, "PUT /v1/users/u{i}: {status}");
    }
    let mut statuses = Vec::with_capacity(emails);
    for i in 0..emails {
        let trigger =
            serde_json::json!({"type": "cluster.mail", "user_id": format!("u{i}"), "idempotency_key": format!("t{i}")});
        statuses.push(call(i, reqwest::Method::POST, "/v1/triggers".into(), trigger).await);
    }
    statuses
}

/// `herald_lost_races_total` by `op`, summed over the instances' `/metrics`.
async fn lost_races(herald: &Cluster) -> std::collections::BTreeMap<String, u64> {
    let mut total = std::collections::BTreeMap::new();
    for i in 0..herald.len() {
        let Ok(resp) = reqwest::get(format!("{}/metrics", herald.base_url(i))).await else { continue };
        let text = resp.text().await.unwrap_or_default();
        for line in text.lines().filter(|l| l.starts_with("herald_lost_races_total{")) {
            let op = line.split("op=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("?").to_owned();
            let n: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            *total.entry(op).or_insert(0) += n as u64;
        }
    }
    total
}

/// Lines a lost race should never produce at ERROR.
fn race_errors(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("ERROR") && (l.contains("1213") || l.contains("40001") || l.contains("40P01")))
        .map(str::to_owned)
        .collect()
}

async fn drain_through_a_node_kill(name: &str, url: &str, instances: usize, kill: impl FnOnce()) {
    let (inbox, emails) =
        (knob("HERALD_TEST_CLUSTER_INBOX_ROWS", 10000) as usize, knob("HERALD_TEST_CLUSTER_EMAILS", 300) as usize);
    sqlx::any::install_default_drivers();
    let store = SqlStore::connect(url, &ConnectOptions::default()).await.unwrap();
    herald::app::migrate_waiting(&store, Duration::from_secs(60), |e, _| eprintln!("{name}: waiting to migrate: {e}"))
        .await
        .unwrap();
    let sink = SmtpSink::start().await;
    let log_dir = output_dir(&format!("db-clusters/{name}"));
    let env = sink.instance_env("cluster");
    let mut herald = common::start_cluster(url.to_owned(), instances, log_dir.clone(), env).await;

    enqueue_inbox(&store, inbox, "cluster", Duration::ZERO).await;
    let statuses = post_email_triggers(&store, &herald, emails).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    kill();
    let killed = Instant::now();
    eprintln!("{name}: database node killed 3 s after the last trigger");
    // The harness's own pool reconnects through HAProxy like the instances.
    let mut drained = None;
    while killed.elapsed() < BOUND + Duration::from_secs(60) {
        if let Ok(0) = cluster::non_terminal(store.pool()).await {
            drained = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let alive: Vec<bool> = (0..instances).map(|i| herald.check_alive(i).is_ok()).collect();
    let races = lost_races(&herald).await;
    let unclean = herald.stop(Duration::from_secs(30)).await;
    let audit = cluster::audit(store.pool()).await.unwrap();
    let received = sink.messages_per_outbox_id();
    let duplicate_emails: u32 = received.values().map(|n| n - 1).sum();
    let race_errors: Vec<String> = (0..instances).flat_map(|i| race_errors(&herald.log(i))).collect();
    let api_5xx = statuses.iter().filter(|s| **s >= 500 || **s == 0).count();
    let report = serde_json::json!({
        "cluster": name, "instances": instances, "inbox_rows": inbox, "emails": emails, "api_5xx": api_5xx,
        "all_sent_after_kill_s": drained.map(|d| d.as_secs_f64()), "duplicate_emails": duplicate_emails,
        "emails_received": received.len(), "race_error_lines": race_errors.len(), "audit": audit,
        "lost_races": races, "lost_races_total": races.values().sum::<u64>(),
    });
    std::fs::write(log_dir.join("report.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("{name}: {report}");

    assert_eq!(api_5xx, 0, "trigger answers: {statuses:?}");
    assert!(statuses.iter().all(|s| *s == 202), "every trigger acknowledged: {statuses:?}");
    assert!(alive.iter().all(|a| *a), "an instance died: {alive:?}; logs in {}", log_dir.display());
    assert!(unclean.is_empty(), "instances did not stop cleanly: {unclean:?}");
    let took = drained
        .unwrap_or_else(|| panic!("not drained {:?} after the kill: {audit:?}", BOUND + Duration::from_secs(60)));
    assert!(took <= BOUND, "every row sent {took:?} after the kill, more than {BOUND:?}");
    assert_eq!(audit.violations(), Vec::<String>::new(), "logs in {}", log_dir.display());
    assert_eq!(audit.inbox_duplicated, 0);
    assert_eq!(received.len(), emails, "every email reached the SMTP server");
    assert_eq!(duplicate_emails, 0, "emails received twice");
    assert!(race_errors.is_empty(), "lost races logged at ERROR: {race_errors:#?}");
    store.close().await;
}

async fn galera_three_nodes_one_killed() {
    let galera = Script::new("galera.sh", "HERALD_GALERA_DIR");
    drain_through_a_scripted_kill(&galera, "galera", "mysql://herald@127.0.0.1:3310/herald", 3, &["kill", "2"]).await;
}

async fn patroni_leader_killed() {
    let patroni = Script::new("patroni.sh", "HERALD_PATRONI_DIR");
    drain_through_a_scripted_kill(
        &patroni,
        "patroni",
        "postgres://postgres@127.0.0.1:5440/herald",
        2,
        &["kill", "leader"],
    )
    .await;
}

/// [`drain_through_a_node_kill`] on a fresh cluster from `script`, the node
/// killed by running it with `kill`; the script's view of the cluster
/// before and after goes to the test's output.
async fn drain_through_a_scripted_kill(script: &Script, name: &str, url: &str, instances: usize, kill: &[&str]) {
    script.run(&["stop", "--clean"]);
    eprintln!("{}", script.run(&["up"]));
    drain_through_a_node_kill(name, url, instances, || {
        eprintln!("{}", script.run(kill));
    })
    .await;
    eprintln!("{}", script.run(&["state"]));
}

/// `(outbox id, send-log row id, channel)` of every `sent` outcome.
async fn sent_outcomes(pool: &sqlx::AnyPool) -> std::collections::BTreeMap<String, (String, String)> {
    use sqlx::Row;
    let rows = sqlx::query("SELECT outbox_id, id, channel FROM engagement_sends WHERE status = 'sent'")
        .fetch_all(pool)
        .await
        .unwrap();
    rows.iter().map(|r| (r.get::<String, _>(0), (r.get::<String, _>(1), r.get::<String, _>(2)))).collect()
}

async fn scalar(pool: &sqlx::AnyPool, sql: &str) -> Result<i64, sqlx::Error> {
    use sqlx::Row;
    sqlx::query(sql).fetch_one(pool).await?.try_get::<i64, _>(0)
}

/// Waits until node `standby` has replayed everything node `leader` had
/// written when asked.
async fn wait_caught_up(leader: &sqlx::AnyPool, standby: &sqlx::AnyPool) -> Duration {
    use sqlx::Row;
    let started = Instant::now();
    let lsn: String =
        sqlx::query("SELECT pg_current_wal_lsn()::text").fetch_one(leader).await.unwrap().get::<String, _>(0);
    let sql = format!("SELECT CASE WHEN pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn THEN 1 ELSE 0 END::bigint");
    while scalar(standby, &sql).await.unwrap() != 1 {
        assert!(started.elapsed() < Duration::from_secs(60), "the standby did not catch up with {lsn}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

/// Patroni with asynchronous replication: what a failover loses.
async fn patroni_async_leader_killed() {
    const ASYNC_BOUND: Duration = Duration::from_secs(240);
    let lag = Duration::from_secs(knob("HERALD_TEST_ASYNC_LAG_SECS", 8));
    let (inbox, emails) =
        (knob("HERALD_TEST_CLUSTER_INBOX_ROWS", 10000) as usize, knob("HERALD_TEST_CLUSTER_EMAILS", 300) as usize);
    let patroni = Script::new("patroni.sh", "HERALD_PATRONI_DIR");
    patroni.run(&["stop", "--clean"]);
    eprintln!("{}", patroni.run(&["up", "--async"]));
    let url = "postgres://postgres@127.0.0.1:5440/herald";
    sqlx::any::install_default_drivers();
    let store = SqlStore::connect(url, &ConnectOptions::default()).await.unwrap();
    herald::app::migrate_waiting(&store, Duration::from_secs(60), |e, _| eprintln!("async: waiting to migrate: {e}"))
        .await
        .unwrap();
    // Asynchronous: the standby may not have replayed `CREATE DATABASE`
    // yet when `up` returns (a run failed on that): ask again for a while.
    let node = |port: u16| async move {
        let started = Instant::now();
        loop {
            let pool = sqlx::pool::PoolOptions::<sqlx::Any>::new()
                .max_connections(2)
                .acquire_timeout(Duration::from_secs(5))
                .connect(&format!("postgres://postgres@127.0.0.1:{port}/herald"))
                .await;
            match pool {
                Ok(pool) => break pool,
                Err(e) if started.elapsed() < Duration::from_secs(30) => {
                    eprintln!("async: node on {port} not ready: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("node on {port}: {e}"),
            }
        }
    };
    // `up` makes pg1 the leader and pg2 its standby.
    let (pg1, pg2) = (node(5441).await, node(5442).await);
    assert_eq!(scalar(&pg2, "SELECT CASE WHEN pg_is_in_recovery() THEN 1 ELSE 0 END::bigint").await.unwrap(), 1);

    let sink = SmtpSink::start().await;
    let log_dir = output_dir("db-clusters/patroni-async");
    let mut env = sink.instance_env("cluster");
    // A row whose outcome the failover lost but whose claim survived is
    // held by a live instance that renews its lease: only the stale window
    // takes it back (15 minutes by default).
    env.push(("HERALD_WORKER__STALE".to_owned(), "90s".to_owned()));
    let mut herald = common::start_cluster(url.to_owned(), 2, log_dir.clone(), env).await;

    let statuses = post_email_triggers(&store, &herald, emails).await;
    // The inbox rows fall due once replication is held, so that their
    // outcomes are committed on the leader alone.
    enqueue_inbox(&store, inbox, "async", Duration::from_secs(2)).await;
    // Everything acknowledged so far is on the standby: what the failover
    // loses below is outcomes, not input.
    let caught_up = wait_caught_up(&pg1, &pg2).await;
    if !lag.is_zero() {
        eprintln!("async: {}", patroni.run(&["lag", "on"]));
    }
    tokio::time::sleep(lag.max(Duration::from_secs(3))).await;
    let before_kill = sent_outcomes(&pg1).await;
    let standby_behind_bytes = scalar(
        &pg1,
        "SELECT COALESCE(MAX(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)), -1)::bigint FROM pg_stat_replication",
    )
    .await
    .unwrap_or(-1);
    eprintln!("{}", patroni.run(&["kill", "leader"]));
    let killed = Instant::now();
    // The held WAL senders died with the node (`kill` takes all its
    // processes): what they had not sent is lost to the standby.
    pg1.close().await;
    let mut promoted = None;
    while killed.elapsed() < Duration::from_secs(90) {
        if let Ok(0) = scalar(&pg2, "SELECT CASE WHEN pg_is_in_recovery() THEN 1 ELSE 0 END::bigint").await {
            promoted = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after_promotion = sent_outcomes(&pg2).await;
    let mut drained = None;
    while killed.elapsed() < ASYNC_BOUND {
        if let Ok(0) = cluster::non_terminal(store.pool()).await {
            drained = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let alive: Vec<bool> = (0..2).map(|i| herald.check_alive(i).is_ok()).collect();
    let unclean = herald.stop(Duration::from_secs(30)).await;
    let audit = cluster::audit(store.pool()).await.unwrap();
    let finally = sent_outcomes(&pg2).await;
    // Outcomes the old primary had committed that the promoted standby did
    // not have: their send-log rows are gone, and those rows were delivered
    // again (the audit below holds every row `sent` with one outcome).
    let lost: Vec<&String> = before_kill
        .iter()
        .filter(|(id, (send, _))| finally.get(*id).is_none_or(|f| &f.0 != send))
        .map(|(id, _)| id)
        .collect();
    let lost_of = |channel: &str| lost.iter().filter(|id| before_kill[**id].1 == channel).count();
    let missing_at_promotion = before_kill.keys().filter(|id| !after_promotion.contains_key(*id)).count();
    let received = sink.messages_per_outbox_id();
    let duplicate_emails: u32 = received.values().map(|n| n - 1).sum();
    let max_copies = received.values().copied().max().unwrap_or(0);
    let report = serde_json::json!({
        "cluster": "patroni-async", "lag_secs": lag.as_secs(), "inbox_rows": inbox, "emails": emails,
        "standby_caught_up_after_input_s": caught_up.as_secs_f64(),
        "standby_behind_at_kill_bytes": standby_behind_bytes,
        "sent_on_leader_before_kill": before_kill.len(),
        "promoted_after_kill_s": promoted.map(|d| d.as_secs_f64()),
        "sent_on_standby_at_promotion": after_promotion.len(),
        "sent_on_leader_missing_at_promotion": missing_at_promotion,
        "outcomes_lost": lost.len(), "outcomes_lost_inbox": lost_of("inbox"), "outcomes_lost_email": lost_of("email"),
        "duplicate_emails": duplicate_emails,
        "emails_received": received.len(), "all_sent_after_kill_s": drained.map(|d| d.as_secs_f64()),
        "audit": audit,
    });
    std::fs::write(log_dir.join("report.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("patroni-async: {report}");
    eprintln!("{}", patroni.run(&["state"]));

    assert!(statuses.iter().all(|s| *s == 202), "every trigger acknowledged: {statuses:?}");
    assert!(alive.iter().all(|a| *a), "an instance died: {alive:?}; logs in {}", log_dir.display());
    assert!(unclean.is_empty(), "instances did not stop cleanly: {unclean:?}");
    promoted.expect("the standby was not promoted within 90 s of the kill");
    let took = drained.unwrap_or_else(|| panic!("not drained {ASYNC_BOUND:?} after the kill: {audit:?}"));
    eprintln!("async: every row sent {took:?} after the kill");
    assert_eq!(audit.rows, (inbox + emails) as i64, "no acknowledged row lost: {audit:?}");
    assert_eq!(audit.violations(), Vec::<String>::new(), "logs in {}", log_dir.display());
    assert_eq!(audit.inbox_duplicated, 0, "an inbox message doubled");
    assert_eq!(received.len(), emails, "every email reached the SMTP server");
    assert!(max_copies <= 2, "one failover sends a message at most twice; got {max_copies}");
    if !lag.is_zero() {
        // The point of the test: with replication held, the promoted
        // standby lacks outcomes the old primary committed, and those
        // messages go again.
        assert!(!lost.is_empty(), "the standby lost no outcome although replication was held for {lag:?}");
        // An email whose outcome was lost had reached the server; it went again.
        let again = lost.iter().filter(|id| before_kill[**id].1 == "email" && received.get(**id) == Some(&2)).count();
        assert_eq!(again, lost_of("email"), "every email whose outcome was lost was received twice");
    }
    store.close().await;
    pg2.close().await;
}

fn main() -> std::process::ExitCode {
    use common::harness::on_request;
    const WHY: &str = "starts a database cluster as root on fixed ports and takes minutes";
    common::harness::main(vec![
        on_request("galera_three_nodes_one_killed", WHY, galera_three_nodes_one_killed),
        on_request("patroni_leader_killed", WHY, patroni_leader_killed),
        on_request("patroni_async_leader_killed", WHY, patroni_async_leader_killed),
    ])
}
