//! `herald bench --pipeline`: the whole path at once, as a user runs it.
//!
//! Starts the service in this process on a scratch database, with an
//! enabled inbox rule that has a condition and a German variant, and a
//! thousand recipients (half of them German), then drives `POST
//! /v1/triggers` over loopback HTTP from N connections for the duration
//! while the worker delivers, and waits for the drain. It measures what a
//! user would: triggers accepted per second and the API's latency, messages
//! delivered per second while the load runs, each message's time from its
//! trigger being recorded to its inbox message being committed, the backlog
//! left when the load stops, and the process's memory. Before the load it
//! sends single triggers into the idle service, spaced apart, for the
//! latency of one message on its own. Every trigger accepted must end with
//! exactly one inbox message, or the bench fails.
//!
//! The load generator shares the process (and the machine's cores) with
//! the service, as a co-located client would; its cost is in the figures.
//!
//! Latencies go into histograms (`hdrhistogram`, three significant
//! digits), not lists: the clients once kept every request's latency, 8
//! bytes a trigger, and the per-second RSS of a long run grew with it (a
//! heap profile of the load, `--features dhat-heap`, found those lists the
//! only allocation that grew with the triggers), which read as a leak in
//! the service; and the trigger-to-delivery times, read back whole after
//! the load, took 250 MiB after ten minutes. A list gives exact
//! percentiles, which the bench does not need.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::Row;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::store::{ConnectOptions, RecipientRow, RecipientStore, RuleStore, SqlStore, Store};
use hdrhistogram::Histogram;

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub duration: Duration,
    pub connections: usize,
    /// A scratch database; a temporary SQLite file when `None`.
    pub database_url: Option<String>,
    /// Distinct recipients the triggers go to.
    pub users: usize,
    /// Give the rule every workflow that keeps one message per trigger: a
    /// send window (open for the run), a frequency cap (never reached),
    /// escalation (its follow-ups due after the run), a display name; and
    /// each recipient a time zone and quiet hours (outside the run). A
    /// digest is left out: it folds triggers into fewer messages by design,
    /// so its rate is not comparable. `HERALD_BENCH_WF=throttle,escalate`
    /// (field-name prefixes) keeps only those fields, to see what each
    /// costs.
    pub workflows: bool,
}

/// Connections the pipeline bench drives by default. The load is a closed
/// loop (each connection waits for its answer before the next trigger), so
/// it can only show a rate the connections can carry at the service's
/// latency: 16 connections at a p50 of 7 ms cannot send more than about
/// 2,300 triggers a second however fast the service is. 160 gave the most
/// triggers within a p99 of 50 ms on the 2-core CI machine on 2026-12-04
/// (SQLite 5,020-5,775/s at p99 38-47 ms, PostgreSQL 6,403/s at p99 44 ms;
/// 128 gave less on SQLite, 192 only queued: p99 67 ms). The default was
/// 16, so `herald bench --pipeline` with no flags measured the load
/// generator rather than Herald.
pub const DEFAULT_CONNECTIONS: usize = 160;

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            duration: Duration::from_secs(15),
            connections: DEFAULT_CONNECTIONS,
            database_url: None,
            users: 1000,
            workflows: false,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// One second of the load: what a total hides (a run that slows down after
/// its first seconds, memory that keeps growing).
#[derive(Debug, Clone, Serialize)]
pub struct LoadSecond {
    /// Seconds since the load started, at the end of this interval (the
    /// last one may be shorter than a second).
    pub at_seconds: f64,
    /// Triggers answered 202 in this interval.
    pub accepted: u64,
    /// Inbox messages committed in this interval.
    pub delivered: u64,
    /// The process's RSS at the end of this interval.
    pub rss_mib: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    pub database: String,
    /// Whether the rule had the workflows on (`--workflows`).
    pub workflows: bool,
    pub connections: usize,
    pub duration_seconds: f64,
    /// Triggers answered 202, per second of load.
    pub triggers_accepted: u64,
    pub triggers_per_sec: f64,
    /// Requests answered anything but 202 (the bench fails on any).
    pub errors: u64,
    pub api_latency_ms: Percentiles,
    /// Inbox messages committed while the load ran, per second.
    pub delivered_per_sec: f64,
    /// From the trigger recorded to its inbox message committed, over every
    /// message of the run (load and drain).
    pub trigger_to_delivery_ms: Percentiles,
    /// The same for single triggers sent into the idle service.
    pub idle_trigger_to_delivery_ms: Percentiles,
    /// Triggers accepted but not yet delivered when the load stopped.
    pub backlog_at_end: u64,
    /// Seconds from the load's end until every accepted trigger had its
    /// message.
    pub drain_after_load_seconds: f64,
    pub rss_start_mib: f64,
    pub rss_end_mib: f64,
    pub peak_rss_mib: f64,
    /// Second by second while the load ran. Requests still in flight when
    /// it stopped count in `triggers_accepted`, not here.
    pub per_second: Vec<LoadSecond>,
    /// PostgreSQL only: transactions committed per delivered message.
    pub pg_commits_per_message: Option<f64>,
    pub cores: usize,
}

/// A scratch database for a bench that runs the whole service: the URL
/// given, or a SQLite file in the returned directory; migrated.
pub(crate) async fn scratch_database(url: Option<&str>) -> anyhow::Result<(tempfile::TempDir, String, SqlStore)> {
    let dir = tempfile::tempdir()?;
    let url = match url {
        Some(u) => u.to_owned(),
        None => format!("sqlite://{}", dir.path().join("bench.db").display()),
    };
    let store = SqlStore::connect(&url, &ConnectOptions::default()).await?;
    store.migrate().await?;
    Ok((dir, url, store))
}

/// `herald serve` in this process on a scratch database, answering on a
/// loopback port.
pub(crate) struct Service {
    pub base: String,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Service {
    /// Starts the service with the default settings as `configure` leaves
    /// them, and waits until it answers.
    pub(crate) async fn start(
        dir: &tempfile::TempDir,
        url: &str,
        http: &reqwest::Client,
        configure: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Service> {
        let mut config = Config {
            database_url: url.to_owned(),
            data_dir: dir.path().to_owned(),
            migrate_on_start: false,
            ..Config::default()
        };
        configure(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shutdown = CancellationToken::new();
        let server = {
            let (store, shutdown) = (SqlStore::connect(url, &ConnectOptions::default()).await?, shutdown.clone());
            tokio::spawn(async move { crate::app::serve_until(config, store, listener, shutdown).await })
        };
        let started = Instant::now();
        while http.get(format!("{base}/healthz")).send().await.is_err() {
            anyhow::ensure!(started.elapsed() < Duration::from_secs(20), "the service did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Service { base, shutdown, server })
    }

    /// Stops it, and reports how it ended.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.server.await?
    }
}

const KEY_NAME: &str = "bench-pipeline";
const TRIGGER_TYPE: &str = "bench.pipeline";
/// How long the drain after the load may take before the bench gives up.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

pub async fn run(opts: &PipelineOptions) -> anyhow::Result<PipelineReport> {
    anyhow::ensure!(opts.connections >= 1, "--connections: 0 is not accepted; expected 1 or more");
    let (dir, url, store) = scratch_database(opts.database_url.as_deref()).await?;
    let key = setup(&store, opts.users, opts.workflows).await?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(opts.connections).build()?;
    let service = Service::start(&dir, &url, &http, |_| {}).await?;
    let base = service.base.clone();

    // One message at a time into the idle service.
    for n in 0..20 {
        let status = post(&http, &base, &key, &format!("idle-{n}"), n).await?;
        anyhow::ensure!(status == 202, "an idle trigger was answered {status}");
        wait_for_inbox(&store, n as u64 + 1).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle = latencies(&store).await?;
    let idle_delivered = count_inbox(&store).await?;

    let commits_before = crate::tooling::bench::pg_commits(&store).await?;
    let rss_start = rss_mib("VmRSS");
    let stop = Arc::new(AtomicBool::new(false));
    let (accepted, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..opts.connections {
        let (http, base, key, stop, accepted, errors) =
            (http.clone(), base.clone(), key.clone(), stop.clone(), accepted.clone(), errors.clone());
        let users = opts.users;
        clients.spawn(async move {
            let mut latencies = histogram(API_LATENCY_MAX_US);
            let mut n = c;
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                match post(&http, &base, &key, &format!("u{}", n % users), n).await {
                    Ok(202) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                        latencies.saturating_record(sent.elapsed().as_micros() as u64);
                    }
                    Ok(status) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(status, "a trigger was refused");
                    }
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "a trigger request failed");
                    }
                }
                n += users * 1000 + 1;
            }
            latencies
        });
    }
    // `--features dhat-heap`: profile only the load, so the profile's end
    // holds exactly what the load allocated and still held when it stopped
    // (what accumulates), not the setup's or the drain's allocations.
    #[cfg(feature = "dhat-heap")]
    let profiler = dhat::Profiler::builder().file_name("dhat-heap-load.json").build();
    let load_started = Instant::now();
    let mut per_second = Vec::new();
    let (mut accepted_before, mut delivered_before) = (0, idle_delivered);
    loop {
        let left = opts.duration.saturating_sub(load_started.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        // The load stops before the last second's count is read, so the
        // series leaves out only what was in flight at that moment (at most
        // one request per connection); counting first and stopping after the
        // inbox count (a query that can take a while on a busy machine) let
        // any number of requests fall between the two.
        if load_started.elapsed() >= opts.duration {
            stop.store(true, Ordering::Relaxed);
        }
        let accepted_now = accepted.load(Ordering::Relaxed);
        let delivered_now = count_inbox(&store).await?;
        per_second.push(LoadSecond {
            at_seconds: load_started.elapsed().as_secs_f64(),
            accepted: accepted_now - accepted_before,
            delivered: delivered_now.saturating_sub(delivered_before),
            rss_mib: rss_mib("VmRSS"),
        });
        (accepted_before, delivered_before) = (accepted_now, delivered_now);
    }
    stop.store(true, Ordering::Relaxed);
    #[cfg(feature = "dhat-heap")]
    drop(profiler);
    let mut api = histogram(API_LATENCY_MAX_US);
    while let Some(done) = clients.join_next().await {
        api.add(done?)?;
    }
    let load = load_started.elapsed();
    let delivered_in_load = count_inbox(&store).await? - idle_delivered;
    let accepted = accepted.load(Ordering::Relaxed);
    let rss_end = rss_mib("VmRSS");

    let drain_started = Instant::now();
    while count_inbox(&store).await? < idle_delivered + accepted {
        anyhow::ensure!(
            drain_started.elapsed() < DRAIN_LIMIT,
            "the backlog was not delivered within {}s of the load's end",
            DRAIN_LIMIT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drain_after = drain_started.elapsed();
    let all = latencies(&store).await?;
    verify(&store, idle_delivered + accepted).await?;
    let commits = match commits_before {
        Some(before) => crate::tooling::bench::pg_commits(&store).await?.map(|after| after - before),
        None => None,
    };
    service.stop().await?;
    store.close().await;

    let per_sec = |n: u64| n as f64 / load.as_secs_f64();
    Ok(PipelineReport {
        database: store.dialect().to_string(),
        workflows: opts.workflows,
        connections: opts.connections,
        duration_seconds: load.as_secs_f64(),
        triggers_accepted: accepted,
        triggers_per_sec: per_sec(accepted),
        errors: errors.load(Ordering::Relaxed),
        api_latency_ms: ms(&api, 1000.0),
        delivered_per_sec: per_sec(delivered_in_load),
        trigger_to_delivery_ms: ms(&all, 1.0),
        idle_trigger_to_delivery_ms: ms(&idle, 1.0),
        backlog_at_end: accepted.saturating_sub(delivered_in_load),
        drain_after_load_seconds: drain_after.as_secs_f64(),
        rss_start_mib: rss_start,
        rss_end_mib: rss_end,
        peak_rss_mib: rss_mib("VmHWM"),
        per_second,
        // Read while the service still held its connections open: a
        // backend reports its counts as it goes, so this undercounts a
        // little at most.
        pg_commits_per_message: commits.map(|c| c as f64 / (accepted.max(1)) as f64),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

/// An API key, an enabled inbox rule with a condition and a German variant,
/// and the recipients.
async fn setup(store: &SqlStore, users: usize, workflows: bool) -> anyhow::Result<String> {
    use crate::clock::{Clock, SystemClock};
    let now = SystemClock.now();
    let (key, row) = crate::http::auth::generate(KEY_NAME, now);
    store.insert_api_key(&row).await?;
    let mut body = serde_json::json!({
        "name": "Pipeline bench", "trigger_type": TRIGGER_TYPE, "channel": "inbox", "category": "bench",
        "enabled": true, "condition": "payload.n >= 0",
        "template": {"fallback_locale": "en", "locales": {
            "en": {"subject": "Your export {{ payload.name }} is ready", "text": "Hello {{ user.name }}, {{ payload.n }} rows."},
            "de": {"subject": "Dein Export {{ payload.name }} ist fertig", "text": "Hallo {{ user.name }}, {{ payload.n }} Zeilen."}
        }}
    });
    // Times of day around now (UTC): the window is open for the run, the
    // quiet hours are not on.
    let hhmm = |hours: i64| {
        let t = chrono::Utc::now() + chrono::Duration::hours(hours);
        t.format("%H:%M").to_string()
    };
    if workflows {
        let extra = serde_json::json!({
            "send_window": {"from": hhmm(-1), "until": hhmm(3)},
            "throttle": {"limit": 20, "per": 1, "scope": "rule"},
            "escalate": {"after": 86400, "unless": "read", "channel": "email", "template": {"fallback_locale": "en",
                "locales": {"en": {"subject": "Unread: export {{ payload.name }}", "text": "See the app."}}}},
            "display_name": "Exports", "description": "When an export is ready",
        });
        let mut extra = extra.as_object().expect("an object").clone();
        if let Ok(only) = std::env::var("HERALD_BENCH_WF") {
            extra.retain(|k, _| only.split(',').any(|o| k.starts_with(o)));
        }
        body.as_object_mut().expect("an object").extend(extra);
    }
    let rule: crate::planning::rule::RuleInput = serde_json::from_value(body)?;
    let rule = rule.into_row(now, &Default::default()).map_err(|e| anyhow::anyhow!("bench rule: {e:?}"))?;
    store.insert_rule(&rule).await?;
    let idle = (0..20).map(|i| (format!("idle-{i}"), "en"));
    let loaded = (0..users).map(|i| (format!("u{i}"), if i % 2 == 0 { "en" } else { "de" }));
    for (user_id, locale) in idle.chain(loaded) {
        let r = RecipientRow {
            name: Some(format!("User {user_id}")),
            user_id,
            email: None,
            locale: Some(locale.to_owned()),
            timezone: workflows.then(|| "UTC".to_owned()),
            preferences: serde_json::json!({}),
            quiet_hours: workflows
                .then(|| crate::planning::workflow::QuietHoursInput { from: hhmm(4), until: hhmm(5) }),
            phone: None,
            phone_hash: None,
            slack_user_id: None,
            user_choices: Default::default(),
            created_at: now,
            updated_at: now,
        };
        // On Galera the setup's writes race the service's own (the bench's
        // worker runs already): a lost race is tried again, as the API does.
        crate::store::race::retry_lost_race("bench setup", || store.put_recipient(&r)).await?;
    }
    Ok(key)
}

async fn post(http: &reqwest::Client, base: &str, key: &str, user: &str, n: usize) -> anyhow::Result<u16> {
    let body = serde_json::json!({"type": TRIGGER_TYPE, "user_id": user, "payload": {"n": n, "name": format!("q{n}")}});
    let resp = http.post(format!("{base}/v1/triggers")).bearer_auth(key).json(&body).send().await?;
    let status = resp.status().as_u16();
    resp.bytes().await?;
    Ok(status)
}

async fn count_inbox(store: &SqlStore) -> anyhow::Result<u64> {
    let row = sqlx::query("SELECT COUNT(*) FROM engagement_inbox").fetch_one(store.pool()).await?;
    Ok(row.try_get::<i64, _>(0)? as u64)
}

async fn wait_for_inbox(store: &SqlStore, n: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    while count_inbox(store).await? < n {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(10), "an idle trigger was not delivered within 10 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// The longest API latency the histogram tells apart (a minute, in µs);
/// longer ones count as a minute.
const API_LATENCY_MAX_US: u64 = 60_000_000;
/// The longest trigger-to-delivery time likewise (an hour, in ms).
const DELIVERY_LATENCY_MAX_MS: u64 = 3_600_000;

/// An empty histogram of values from 0 to `max`, to three significant
/// digits (about 50 KiB, whatever it counts).
fn histogram(max: u64) -> Histogram<u64> {
    Histogram::new_with_bounds(1, max, 3).expect("fixed bounds that hdrhistogram accepts")
}

/// Each delivered message's time from its trigger recorded to its inbox
/// message committed, in milliseconds. Streamed: a long run has millions.
async fn latencies(store: &SqlStore) -> anyhow::Result<Histogram<u64>> {
    use futures::TryStreamExt;
    let mut out = histogram(DELIVERY_LATENCY_MAX_MS);
    let mut rows = sqlx::query(
        "SELECT i.created_at - t.created_at FROM engagement_inbox i \
         JOIN engagement_outbox o ON o.id = i.outbox_id JOIN engagement_triggers t ON t.id = o.trigger_id",
    )
    .fetch(store.pool());
    while let Some(row) = rows.try_next().await? {
        out.saturating_record(row.try_get::<i64, _>(0)?.max(0) as u64);
    }
    Ok(out)
}

/// Every trigger has exactly one inbox message, and nothing else is there.
async fn verify(store: &SqlStore, expected: u64) -> anyhow::Result<()> {
    let scalar = |sql: &'static str| async move {
        let row = sqlx::query(sql).fetch_one(store.pool()).await?;
        anyhow::Ok(row.try_get::<i64, _>(0)? as u64)
    };
    let triggers = scalar("SELECT COUNT(*) FROM engagement_triggers").await?;
    let without = scalar(
        "SELECT COUNT(*) FROM engagement_triggers t WHERE NOT EXISTS (SELECT 1 FROM engagement_outbox o \
         JOIN engagement_inbox i ON i.outbox_id = o.id WHERE o.trigger_id = t.id)",
    )
    .await?;
    let doubled = scalar(
        "SELECT COUNT(*) FROM (SELECT o.trigger_id FROM engagement_outbox o JOIN engagement_inbox i \
         ON i.outbox_id = o.id GROUP BY o.trigger_id HAVING COUNT(*) > 1) d",
    )
    .await?;
    let inbox = count_inbox(store).await?;
    anyhow::ensure!(
        triggers == expected && without == 0 && doubled == 0 && inbox == expected,
        "every accepted trigger must end with exactly one inbox message: {expected} accepted, {triggers} recorded, \
         {inbox} messages, {without} triggers without one, {doubled} with more than one"
    );
    Ok(())
}

fn ms(h: &Histogram<u64>, per_ms: f64) -> Percentiles {
    let get = |q| h.value_at_quantile(q) as f64 / per_ms;
    Percentiles { p50: get(0.5), p99: get(0.99), max: h.max() as f64 / per_ms }
}

/// A figure from /proc/self/status, in MiB.
pub(crate) fn rss_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()))
        .map_or(0.0, |kib| kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short run on SQLite: every accepted trigger ends with its message
    /// (`run` fails otherwise), and the per-second series covers the load
    /// and adds up to what the totals say.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_run_reports_each_second_of_its_load() {
        let opts =
            PipelineOptions { duration: Duration::from_secs(2), connections: 2, users: 20, ..Default::default() };
        let r = run(&opts).await.unwrap();
        assert!(r.triggers_accepted > 0 && r.errors == 0, "{r:?}");
        assert_eq!(r.per_second.len(), 2, "one entry per second of load: {:?}", r.per_second);
        assert!(r.per_second.windows(2).all(|w| w[0].at_seconds < w[1].at_seconds));
        let accepted: u64 = r.per_second.iter().map(|s| s.accepted).sum();
        assert!(accepted > 0 && accepted <= r.triggers_accepted, "{accepted} of {}", r.triggers_accepted);
        assert!(
            accepted + opts.connections as u64 >= r.triggers_accepted,
            "at most one request in flight per connection is left out"
        );
        assert!(r.per_second.iter().all(|s| s.rss_mib > 0.0));
    }
}
