//! `herald bench --fanout --subscribers N`: one trigger to a topic of N.
//!
//! Starts the service in this process on a scratch database with one
//! enabled inbox rule, subscribes N users to a topic through the API (calls
//! of 10,000), sends one trigger to the topic, and measures what a user
//! would: how long subscribing took, how long the trigger's answer took,
//! how fast the expander planned (rows a second, from the trigger's
//! `created_at` to its `planned_at`), the time from the trigger to the
//! first and to the last delivered message (read from the send log), and
//! the process's peak memory during the fan-out (the peak is reset after
//! subscribing, so the subscribers' JSON bodies do not count). Every
//! subscriber must end with exactly one inbox message, or the bench fails.
//!
//! Beside it, `--loop-triggers M` sends M single-recipient triggers through
//! the API from 16 connections, the host's alternative today, and reports
//! its rate: the time a loop over N would take is N divided by it.

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::Row;

use crate::store::{FanOutStore, RecipientStore, SqlStore, Store};

#[derive(Debug, Clone)]
pub struct FanOutOptions {
    pub subscribers: usize,
    /// A scratch database; a temporary SQLite file when `None`.
    pub database_url: Option<String>,
    /// The worker's batch and concurrency.
    pub batch: u32,
    pub concurrency: usize,
    /// Single-recipient triggers to send for the comparison (0: none).
    pub loop_triggers: usize,
    /// Recipients per planning chunk (`planner.fan_out_chunk`).
    pub chunk: u32,
}

#[derive(Debug, Serialize)]
pub struct FanOutReport {
    pub database: String,
    pub cores: usize,
    pub subscribers: usize,
    pub subscribe_seconds: f64,
    pub trigger_answer_ms: f64,
    pub planning_seconds: f64,
    pub planning_rows_per_sec: f64,
    /// Recipients per planning chunk.
    pub chunk: u32,
    pub first_delivered_seconds: f64,
    pub last_delivered_seconds: f64,
    pub delivered: u64,
    pub delivered_per_sec: f64,
    pub peak_rss_mib: f64,
    /// The loop of single triggers: how many, and their rate.
    pub loop_triggers: usize,
    pub loop_triggers_per_sec: Option<f64>,
}

const TOPIC: &str = "bench:announcement";
const TRIGGER_TYPE: &str = "bench.announced";

pub async fn run(opts: &FanOutOptions) -> anyhow::Result<FanOutReport> {
    anyhow::ensure!(opts.subscribers >= 1, "--subscribers: 0 is not accepted; expected 1 or more");
    let (dir, url, store) = crate::tooling::bench_pipeline::scratch_database(opts.database_url.as_deref()).await?;
    let key = setup(&store).await?;
    let http = reqwest::Client::new();
    let service = crate::tooling::bench_pipeline::Service::start(&dir, &url, &http, |config| {
        config.worker.batch = opts.batch;
        config.planner.fan_out_chunk = opts.chunk;
        config.worker.concurrency.insert("inbox".into(), opts.concurrency);
        config.http.max_body_bytes = config.http.max_body_bytes.max(2 << 20);
    })
    .await?;
    let base = service.base.clone();

    let subscribing = Instant::now();
    for first in (0..opts.subscribers).step_by(10_000) {
        let ids: Vec<String> = (first..(first + 10_000).min(opts.subscribers)).map(|i| format!("s{i:08}")).collect();
        let r = http
            .post(format!("{base}/v1/topics/{TOPIC}/subscribers"))
            .bearer_auth(&key)
            .json(&serde_json::json!({ "user_ids": ids }))
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "subscribing was answered {}: {}", r.status(), r.text().await?);
    }
    let subscribe_seconds = subscribing.elapsed().as_secs_f64();
    // The peak from here on: the fan-out's, not the subscribers' bodies.
    let _ = std::fs::write("/proc/self/clear_refs", "5");

    let sent_at = Instant::now();
    let r = http
        .post(format!("{base}/v1/triggers"))
        .bearer_auth(&key)
        .json(&serde_json::json!({"type": TRIGGER_TYPE, "topic": TOPIC, "payload": {"title": "Herald 2.0"}}))
        .send()
        .await?;
    let trigger_answer_ms = sent_at.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(r.status() == 202, "the trigger was answered {}", r.status());
    let answer: serde_json::Value = r.json().await?;
    let trigger_id = answer["trigger_id"].as_str().unwrap_or_default().to_owned();
    wait_until_delivered(&store, &trigger_id).await?;
    let peak_rss_mib = crate::tooling::bench_pipeline::rss_mib("VmHWM");

    let (created, planned, planned_count) = trigger_times(&store, &trigger_id).await?;
    let (first, last, delivered) = delivery_times(&store, &trigger_id).await?;
    anyhow::ensure!(
        delivered == opts.subscribers as u64 && planned_count == opts.subscribers as i64,
        "{} subscribers, but {planned_count} planned and {delivered} delivered",
        opts.subscribers
    );
    let inbox = count(&store, "SELECT COUNT(*) FROM engagement_inbox").await?;
    anyhow::ensure!(inbox == opts.subscribers as i64, "{inbox} inbox messages for {} subscribers", opts.subscribers);
    let seconds = |t: i64| (t - created) as f64 / 1000.0;
    let planning_seconds = seconds(planned);

    let loop_triggers_per_sec = match opts.loop_triggers {
        0 => None,
        n => Some(loop_rate(&http, &base, &key, n).await?),
    };
    service.stop().await?;
    Ok(FanOutReport {
        database: store.dialect().to_string(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        subscribers: opts.subscribers,
        subscribe_seconds,
        trigger_answer_ms,
        planning_seconds,
        planning_rows_per_sec: planned_count as f64 / planning_seconds.max(0.001),
        chunk: opts.chunk,
        first_delivered_seconds: seconds(first),
        last_delivered_seconds: seconds(last),
        delivered,
        delivered_per_sec: delivered as f64 / seconds(last).max(0.001),
        peak_rss_mib,
        loop_triggers: opts.loop_triggers,
        loop_triggers_per_sec,
    })
}

/// The API key, and the one enabled inbox rule.
async fn setup(store: &SqlStore) -> anyhow::Result<String> {
    use crate::clock::{Clock, SystemClock};
    let now = SystemClock.now();
    let (key, row) = crate::http::auth::generate("bench", now);
    store.insert_api_key(&row).await?;
    let body = serde_json::json!({
        "name": "Announcement", "trigger_type": TRIGGER_TYPE, "channel": "inbox", "category": "news", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "{{ payload.title }}", "text": "Read it."}}}
    });
    let input: crate::planning::rule::RuleInput = serde_json::from_value(body)?;
    let rule = input.into_row(now, &Default::default()).map_err(|e| anyhow::anyhow!("the bench's rule: {e:?}"))?;
    crate::store::RuleStore::insert_rule(store, &rule).await?;
    // Same rule for the loop's triggers.
    let mut single = rule.clone();
    single.id = crate::store::new_id();
    single.trigger_type = "bench.single".into();
    crate::store::RuleStore::insert_rule(store, &single).await?;
    Ok(key)
}

/// Waits until the trigger is planned and nothing is left to deliver.
async fn wait_until_delivered(store: &SqlStore, trigger_id: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let planned = store.fan_out_state(trigger_id).await?.is_some_and(|t| t.planned_at.is_some());
        // Through the partial index of unfinished rows: cheap however many
        // are sent.
        let pending = count(
            store,
            "SELECT COUNT(*) FROM (SELECT 1 AS x FROM engagement_outbox WHERE status IN ('scheduled', 'sending') \
             LIMIT 1) AS p",
        )
        .await?;
        if planned && pending == 0 {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(1800), "not delivered within 30 minutes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn count(store: &SqlStore, sql: &str) -> anyhow::Result<i64> {
    let row = sqlx::query(sql).fetch_one(store.pool()).await?;
    Ok(row.try_get::<i64, _>(0)?)
}

/// The trigger's created_at, planned_at and planned_count.
async fn trigger_times(store: &SqlStore, id: &str) -> anyhow::Result<(i64, i64, i64)> {
    let t = store.fan_out_state(id).await?.ok_or_else(|| anyhow::anyhow!("trigger {id} is gone"))?;
    Ok((t.created_at.0, t.planned_at.map_or(0, |p| p.0), t.planned_count.unwrap_or(0)))
}

/// The first and last `sent` send-log row of the trigger, and how many.
async fn delivery_times(store: &SqlStore, id: &str) -> anyhow::Result<(i64, i64, u64)> {
    let sql = store.dialect().sql(
        "SELECT MIN(created_at) AS first, MAX(created_at) AS last, COUNT(*) AS n FROM engagement_sends \
         WHERE trigger_id = ? AND status = 'sent'",
    );
    let row = sqlx::query(&sql).bind(id.to_owned()).fetch_one(store.pool()).await?;
    Ok((row.try_get("first")?, row.try_get("last")?, row.try_get::<i64, _>("n")? as u64))
}

/// Single-recipient triggers through the API from 16 connections: their
/// rate, triggers a second.
async fn loop_rate(http: &reqwest::Client, base: &str, key: &str, n: usize) -> anyhow::Result<f64> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (http, base, key, next) = (http.clone(), base.to_owned(), key.to_owned(), next.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(());
                }
                let body = serde_json::json!({"type": "bench.single", "user_id": format!("s{i:08}"),
                                              "payload": {"title": "Herald 2.0"}});
                let r = http.post(format!("{base}/v1/triggers")).bearer_auth(&key).json(&body).send().await?;
                anyhow::ensure!(r.status() == 202, "a single trigger was answered {}", r.status());
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
