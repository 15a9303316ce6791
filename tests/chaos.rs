//! Chaos: several `herald serve` processes drain one outbox while one of
//! them is SIGKILLed at random every few seconds (the first time once a
//! twentieth of the rows is done) and started again. Then the
//! tables must show every row terminal, one send-log outcome per row that
//! matches it, exactly one inbox message per inbox row, and, for email, every
//! sent row received by the SMTP sink, with duplicates bounded by the kills;
//! for push, every sent row's notification received (verified and
//! decrypted) by its device, duplicates bounded the same way, and each
//! duplicate carrying its first copy's `Topic`, so a push service replaces
//! a copy it still holds instead of showing two.
//!
//! Run only on request (`harness::on_request`, like `#[ignore]`): each run
//! takes tens of seconds. `.ci/run` runs the bounded form on PostgreSQL and
//! MariaDB (the shared test servers, a fresh schema or
//! database each):
//!
//! ```sh
//! cargo test --test chaos -- --ignored --test-threads 1 --nocapture
//! ```
//!
//! Knobs (`HERALD_TEST_*`, which Herald's configuration ignores):
//! `HERALD_TEST_CHAOS_ROWS` (inbox rows, default 5000),
//! `HERALD_TEST_CHAOS_EMAIL_ROWS` (default 1000, also push's), `HERALD_TEST_CHAOS_INSTANCES`
//! (3), `HERALD_TEST_CHAOS_KILL_MIN_MS` / `_MAX_MS` (1000 / 3000),
//! `HERALD_TEST_CHAOS_SEED` (random; printed, so a run can be repeated) and
//! `HERALD_TEST_CHAOS_TIMEOUT_SECS` (300). The full-size run is
//! `HERALD_TEST_CHAOS_ROWS=50000`.
//!
//! Why duplicates are bounded by `kills × batch` for email: a killed instance
//! can have delivered at most one sweep's claims (≤ `worker.batch` rows)
//! whose outcomes were not yet committed; those go again after the stale
//! window. The inbox has no such window: a row is claimed, its message
//! written and its outcome recorded in one transaction, so a kill leaves all
//! of it or none (the audit's `inbox_duplicated` and `inbox_missing` say so).

mod chaos_support;
mod common;

use std::time::{Duration, Instant};

use chaos_support::{knob, output_dir};
use common::smtp::SmtpSink;
use common::{Backend, TestDb};
use herald::clock::{Clock, SystemClock};
use herald::domain::{ChannelName, UserId};
use herald::store::{NewOutboxRow, PushDeviceStore, Store, new_id};
use herald::tooling::cluster::{self, Cluster, ClusterOptions};
use herald::tooling::push_receiver::PushReceiver;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BATCH: u32 = 100;

#[derive(Debug, serde::Serialize)]
struct ChaosReport {
    backend: String,
    channel: String,
    seed: u64,
    instances: usize,
    rows: usize,
    kills: u32,
    seconds: f64,
    /// Email: outbox ids the sink received more than once, and the extra
    /// messages in total.
    email_duplicated_ids: usize,
    email_extra_messages: u64,
    /// Push: devices that got their notification more than once, and the
    /// extra notifications in total.
    push_duplicated_devices: usize,
    push_extra_notifications: u64,
    claimed_more_than_once: i64,
    latency_p50_ms: i64,
    latency_p99_ms: i64,
    audit: cluster::Audit,
}

fn instance_env(extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("HERALD_WORKER__POLL", "1s"),
        ("HERALD_WORKER__BATCH", "100"),
        // Short enough that a killed instance's claims come back within the
        // test, long enough that a live instance's never go stale.
        ("HERALD_WORKER__STALE", "10s"),
        ("HERALD_WORKER__DELIVER_TIMEOUT", "5s"),
        ("HERALD_WORKER__RETRY", "1s"),
        ("HERALD_WORKER__SHUTDOWN_GRACE", "5s"),
        ("HERALD_WEBHOOK__TIMEOUT", "2s"),
        ("HERALD_EMAIL__TIMEOUT", "3s"),
        ("HERALD_EMAIL__ADDRESS_SECRET", "chaos test secret, not for production"),
        ("HERALD_INBOX__TOKEN_SECRET", "chaos test token secret, at least 32 chars"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    env
}

/// The user of row `i`: one user for inbox and email, one per row for push
/// (each with one device).
fn chaos_user(channel: &str, i: usize) -> UserId {
    let id = if channel == "push" { format!("chaos-push-{i}") } else { "chaos-user".to_owned() };
    UserId::parse("user_id", &id).unwrap()
}

async fn enqueue(db: &TestDb, channel: &str, rows: usize) {
    let clock = SystemClock;
    let channel_name = ChannelName::parse("channel", channel).unwrap();
    let rows: Vec<NewOutboxRow> = (0..rows)
        .map(|i| NewOutboxRow {
            id: new_id(),
            dedupe_key: format!("chaos:{i}"),
            rule_id: None,
            trigger_id: None,
            user_id: chaos_user(channel, i),
            channel: channel_name.clone(),
            payload: if channel == "email" {
                serde_json::json!({ "to": format!("ok{i}@chaos.test"), "subject": format!("chaos {i}"), "text": "chaos" })
            } else {
                serde_json::json!({ "title": format!("chaos {i}") })
            },
            due_at: clock.now(),
            expires_at: None,
            follow_up_at: None,
        })
        .collect();
    for chunk in rows.chunks(1000) {
        db.store.enqueue(chunk, clock.now()).await.unwrap();
    }
}

async fn chaos(db: &TestDb, channel: &str) {
    let rows = if channel != "inbox" {
        knob("HERALD_TEST_CHAOS_EMAIL_ROWS", 1000)
    } else {
        knob("HERALD_TEST_CHAOS_ROWS", 5000)
    } as usize;
    let instances = knob("HERALD_TEST_CHAOS_INSTANCES", 3) as usize;
    let (kill_min, kill_max) =
        (knob("HERALD_TEST_CHAOS_KILL_MIN_MS", 1000), knob("HERALD_TEST_CHAOS_KILL_MAX_MS", 3000));
    let timeout = Duration::from_secs(knob("HERALD_TEST_CHAOS_TIMEOUT_SECS", 300));
    let seed = std::env::var("HERALD_TEST_CHAOS_SEED")
        .ok()
        .map(|s| s.parse().expect("HERALD_TEST_CHAOS_SEED: expected a whole number"))
        .unwrap_or_else(rand::random);
    let backend = format!("{:?}", db.backend()).to_lowercase();
    let name = format!("chaos/{backend}-{channel}");
    eprintln!("chaos {name}: seed {seed} (HERALD_TEST_CHAOS_SEED={seed} repeats the kill schedule), {rows} rows");
    let mut rng = StdRng::seed_from_u64(seed);

    let sink = if channel == "email" { Some(SmtpSink::start().await) } else { None };
    let mut extra = Vec::new();
    if let Some(s) = &sink {
        extra.push(("HERALD_EMAIL__TRANSPORT", s.url()));
        extra.push(("HERALD_EMAIL__FROM", "Herald Chaos <chaos@herald.test>".to_owned()));
        extra.push(("HERALD_EMAIL__PUBLIC_URL", "https://herald.test".to_owned()));
    }
    let push = if channel == "push" {
        let (private, public) = herald::delivery::channel::push::vapid::generate_key_pair();
        let (receiver, devices) = PushReceiver::start_reusable(rows, &public).await.unwrap();
        let now = SystemClock.now();
        for (i, d) in devices.iter().enumerate() {
            db.store.register_push_device(chaos_user(channel, i).as_str(), &d.registration(), now).await.unwrap();
        }
        extra.push(("HERALD_PUSH__VAPID_PRIVATE_KEY", private));
        extra.push(("HERALD_PUSH__VAPID_SUBJECT", "mailto:chaos@herald.test".to_owned()));
        extra.push(("HERALD_PUSH__ALLOW_PRIVATE_NETWORKS", "true".to_owned()));
        extra.push(("HERALD_PUSH__TIMEOUT", "3s".to_owned()));
        Some(receiver)
    } else {
        None
    };
    let log_dir = output_dir(&name);
    let mut cluster = Cluster::start(ClusterOptions {
        binary: env!("CARGO_BIN_EXE_herald").into(),
        database_url: db.url.clone(),
        instances,
        log_dir: log_dir.clone(),
        env: instance_env(&extra),
        ready_timeout: Duration::from_secs(60),
    })
    .await
    .unwrap();

    let started = Instant::now();
    enqueue(db, channel, rows).await;
    let pool = db.store.pool();
    let mut kills = 0u32;
    // The first kill lands once the drain is under way (a twentieth of the
    // rows finished), so a fast drain cannot finish before any kill; the
    // rest follow at random intervals.
    let mut first = true;
    loop {
        let done = rows as i64 - cluster::non_terminal(pool).await.unwrap();
        if done >= (rows as i64 / 20).max(1) {
            break;
        }
        cluster.check_all_alive().unwrap();
        assert!(
            started.elapsed() < timeout,
            "the drain did not start within {timeout:?}; logs in {}",
            log_dir.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    'chaos: loop {
        let pause = if first { Duration::ZERO } else { Duration::from_millis(rng.random_range(kill_min..=kill_max)) };
        first = false;
        let until = Instant::now() + pause;
        while Instant::now() < until {
            if cluster::non_terminal(pool).await.unwrap() == 0 {
                break 'chaos;
            }
            cluster.check_all_alive().unwrap();
            assert!(started.elapsed() < timeout, "not drained within {timeout:?}; logs in {}", log_dir.display());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let victim = rng.random_range(0..instances);
        cluster.kill(victim).await.unwrap();
        kills += 1;
        cluster.restart(victim).await.unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    let unclean = cluster.stop(Duration::from_secs(30)).await;
    assert!(unclean.is_empty(), "instances did not stop cleanly on SIGTERM: {unclean:?}");

    let audit = cluster::audit(pool).await.unwrap();
    let latencies = cluster::delivery_latencies_ms(pool).await.unwrap();
    let mut report = ChaosReport {
        backend,
        channel: channel.to_owned(),
        seed,
        instances,
        rows,
        kills,
        seconds,
        email_duplicated_ids: 0,
        email_extra_messages: 0,
        push_duplicated_devices: 0,
        push_extra_notifications: 0,
        claimed_more_than_once: audit.claimed_more_than_once,
        latency_p50_ms: cluster::percentile(&latencies, 50.0).unwrap_or(0),
        latency_p99_ms: cluster::percentile(&latencies, 99.0).unwrap_or(0),
        audit: audit.clone(),
    };
    if let Some(sink) = &sink {
        let received = sink.messages_per_outbox_id();
        let sent_ids: Vec<(String,)> =
            sqlx::query_as("SELECT id FROM engagement_outbox WHERE channel = 'email' AND status = 'sent'")
                .fetch_all(pool)
                .await
                .unwrap();
        let missing: Vec<&String> = sent_ids.iter().map(|(id,)| id).filter(|id| !received.contains_key(*id)).collect();
        assert!(missing.is_empty(), "{} rows are `sent` but the sink never received them: {missing:?}", missing.len());
        report.email_duplicated_ids = received.values().filter(|n| **n > 1).count();
        report.email_extra_messages = received.values().map(|n| u64::from(n - 1)).sum();
    }
    if let Some(receiver) = &push {
        let per_device = receiver.per_device();
        let (refused, first) = receiver.refused();
        assert_eq!(refused, 0, "the push service refused {refused} requests; the first: {first:?}");
        let missing = per_device.iter().filter(|(n, _)| *n == 0).count();
        assert_eq!(missing, 0, "{missing} devices never got their notification");
        for (n, topics) in per_device.iter().filter(|(n, _)| *n > 1) {
            assert!(topics.iter().all(|t| *t == topics[0]), "a second copy under another Topic ({n}): {topics:?}");
        }
        report.push_duplicated_devices = per_device.iter().filter(|(n, _)| *n > 1).count();
        report.push_extra_notifications = per_device.iter().map(|(n, _)| n - 1).sum();
    }
    let json = serde_json::to_string_pretty(&report).unwrap();
    std::fs::write(log_dir.join("report.json"), &json).unwrap();
    eprintln!("chaos {name}: {json}");

    assert!(kills >= 1, "the drain finished before the first kill");
    assert_eq!(audit.violations(), Vec::<String>::new(), "logs in {}", log_dir.display());
    assert_eq!(audit.rows, rows as i64, "every enqueued row is in the outbox");
    assert_eq!(audit.by_status.get("sent").copied(), Some(rows as i64), "every row ends sent: {:?}", audit.by_status);
    if channel == "inbox" {
        assert_eq!(audit.inbox_sent, rows as i64);
    } else {
        let bound = u64::from(kills) * u64::from(BATCH);
        let extra = report.email_extra_messages + report.push_extra_notifications;
        assert!(
            extra <= bound,
            "{extra} duplicate {channel} messages after {kills} kills: more than {bound} (kills × batch)"
        );
    }
}

async fn run_on(backend: Backend, channel: &str) {
    let db = TestDb::new(backend).await;
    chaos(&db, channel).await;
    db.cleanup().await;
}

async fn chaos_postgres_inbox() {
    run_on(Backend::Postgres, "inbox").await;
}

async fn chaos_mariadb_inbox() {
    run_on(Backend::MySql, "inbox").await;
}

async fn chaos_postgres_email() {
    run_on(Backend::Postgres, "email").await;
}

async fn chaos_mariadb_email() {
    run_on(Backend::MySql, "email").await;
}

async fn chaos_postgres_push() {
    run_on(Backend::Postgres, "push").await;
}

fn main() -> std::process::ExitCode {
    use common::harness::on_request;
    const WHY: &str = "a chaos run of tens of seconds that kills herald processes";
    common::harness::main(vec![
        on_request("chaos_postgres_inbox", WHY, chaos_postgres_inbox),
        on_request("chaos_mariadb_inbox", WHY, chaos_mariadb_inbox),
        on_request("chaos_postgres_email", WHY, chaos_postgres_email),
        on_request("chaos_mariadb_email", WHY, chaos_mariadb_email),
        on_request("chaos_postgres_push", WHY, chaos_postgres_push),
    ])
}
