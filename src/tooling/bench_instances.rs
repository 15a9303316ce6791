//! `herald bench --instances N`: the drain rate of N `herald serve`
//! processes sharing one database, and each row's delivery latency.
//!
//! The in-process bench ([`crate::tooling::bench`]) measures the engine: one worker,
//! its sweep driven directly. This one measures the deployment: N real
//! processes (this same binary), each with its own pool and HTTP server,
//! contending for one SQLite file, PostgreSQL or MariaDB through the
//! compare-and-set claim. Both numbers are worth having; neither replaces the
//! other.
//!
//! The rows are enqueued due a day from now, so the instances (already
//! running and idle) ignore them while the insert runs; then one `UPDATE`
//! makes them all due at `t0`. The drain is timed from `t0` to the last
//! outcome's commit, both read from the database, so process start and the
//! bench's own polling are not counted (the instances' idle poll, 200 ms, is:
//! at most that much at the start). Latency is each
//! row's outcome commit minus its due time: in a backlog that is mostly the
//! row's place in the queue, so p50 is about half the drain time and p99
//! about all of it; the spread between instance counts is the figure to read.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use sqlx::Row;

use crate::clock::{Clock, Millis, SystemClock};
use crate::domain::{ChannelName, UserId};
use crate::store::{ConnectOptions, NewOutboxRow, SqlStore, Store, StoreError, new_id};
use crate::tooling::cluster::{Cluster, ClusterOptions, percentile};

#[derive(Debug, Clone)]
pub struct InstancesOptions {
    pub rows: usize,
    pub instances: usize,
    /// A scratch database; a temporary SQLite file when `None`.
    pub database_url: Option<String>,
    pub batch: u32,
    pub concurrency: usize,
    /// The `herald` binary to start; the running executable when `None`.
    pub binary: Option<PathBuf>,
    /// Longest the drain may take before the bench gives up.
    pub timeout: Duration,
    /// `inbox`, or `sms` through an in-process double of Twilio's API
    /// (one number per row).
    pub channel: String,
    /// With `sms`: `sms.rate` for every instance, the rate they share.
    pub sms_rate: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InstancesReport {
    pub database: String,
    pub instances: usize,
    pub rows: usize,
    pub batch: u32,
    pub concurrency: usize,
    /// From `t0` (all rows due) to the last outcome committed.
    pub drain_seconds: f64,
    pub drain_rows_per_sec: f64,
    /// Outcome commit minus due time, over the `sent` rows.
    pub latency_p50_ms: i64,
    pub latency_p99_ms: i64,
    pub latency_max_ms: i64,
    pub sent: usize,
    /// Rows that did not end `sent` (should be 0).
    pub not_sent: i64,
    pub cores: usize,
    /// With `sms`: what the provider's double saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderRate>,
}

/// Texts per second as the provider saw them arrive: what `sms.rate`
/// promises the carrier, measured on its side of the wire.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderRate {
    pub requests: usize,
    /// Requests after the first, over the time from the first to the last.
    pub per_second: f64,
    /// The most requests in any one second (a sliding window over the
    /// arrivals): a shared rate of `r` allows at most `r`.
    pub max_in_any_second: usize,
}

impl ProviderRate {
    fn of(arrivals: &[std::time::Instant]) -> Option<ProviderRate> {
        let (first, last) = (arrivals.first()?, arrivals.last()?);
        let span = last.duration_since(*first).as_secs_f64();
        let mut max = 0;
        let mut start = 0;
        for (end, t) in arrivals.iter().enumerate() {
            while t.duration_since(arrivals[start]) >= Duration::from_secs(1) {
                start += 1;
            }
            max = max.max(end - start + 1);
        }
        Some(ProviderRate {
            requests: arrivals.len(),
            per_second: if span > 0.0 { (arrivals.len() - 1) as f64 / span } else { 0.0 },
            max_in_any_second: max,
        })
    }
}

pub async fn run(opts: &InstancesOptions) -> anyhow::Result<InstancesReport> {
    if opts.instances == 0 {
        anyhow::bail!("--instances: 0 is not accepted; expected 1 or more");
    }
    let tmp = tempfile::tempdir()?;
    let url = match &opts.database_url {
        Some(u) => u.clone(),
        None => format!("sqlite://{}", tmp.path().join("bench.db").display()),
    };
    let store = SqlStore::connect(&url, &ConnectOptions { max_connections: 4, ..Default::default() }).await?;
    store.migrate().await?;
    let dialect = store.dialect();
    let binary = match &opts.binary {
        Some(b) => b.clone(),
        None => std::env::current_exe()?,
    };
    let sms = match opts.channel.as_str() {
        "inbox" => None,
        "sms" => Some(super::bench_messaging::ProviderDouble::start().await?),
        other => anyhow::bail!("--instances: --channel {other:?} is not accepted; expected inbox or sms"),
    };
    let mut env = vec![
        ("HERALD_WORKER__BATCH", opts.batch.to_string()),
        ("HERALD_WORKER__DEFAULT_CONCURRENCY", opts.concurrency.to_string()),
        // Idle instances look for due rows this often; the UPDATE that makes
        // the rows due wakes no one by itself.
        ("HERALD_WORKER__POLL", "200ms".into()),
        ("HERALD_PLANNER__ENABLED", "false".into()),
        ("HERALD_EMAIL__ADDRESS_SECRET", "herald bench secret, not for production".into()),
    ];
    if let Some(double) = &sms {
        env.push(("HERALD_SMS__TRANSPORT", double.twilio_url()));
        env.push(("HERALD_SMS__FROM", "+14155550100".into()));
        if let Some(rate) = opts.sms_rate {
            env.push(("HERALD_SMS__RATE", rate.to_string()));
        }
    }
    let mut cluster = Cluster::start(ClusterOptions {
        binary,
        database_url: url.clone(),
        instances: opts.instances,
        log_dir: tmp.path().join("logs"),
        env: env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
        ready_timeout: Duration::from_secs(30),
    })
    .await?;

    let clock = SystemClock;
    let run_id = new_id();
    let prefix = format!("bench:{run_id}:");
    let user = UserId::parse("bench", "bench-user")?;
    let channel = ChannelName::parse("channel", &opts.channel)?;
    let later = clock.now().plus(Duration::from_secs(86_400));
    let rows: Vec<NewOutboxRow> = (0..opts.rows)
        .map(|i| NewOutboxRow {
            id: new_id(),
            dedupe_key: format!("{prefix}{i}"),
            rule_id: None,
            trigger_id: None,
            user_id: user.clone(),
            channel: channel.clone(),
            payload: match sms {
                Some(_) => super::bench_messaging::payload("sms", i),
                None => serde_json::json!({ "title": format!("bench message {i}") }),
            },
            due_at: later,
            expires_at: None,
            follow_up_at: None,
        })
        .collect();
    for chunk in rows.chunks(1000) {
        store.enqueue(chunk, clock.now()).await?;
    }
    let like = format!("{prefix}%");
    let t0 = clock.now();
    sqlx::query(&dialect.sql("UPDATE engagement_outbox SET due_at = ? WHERE dedupe_key LIKE ?"))
        .bind(t0.0)
        .bind(like.clone())
        .execute(store.pool())
        .await
        .map_err(StoreError::db("bench: make rows due"))?;

    let pending_sql = dialect
        .sql("SELECT COUNT(*) FROM engagement_outbox WHERE dedupe_key LIKE ? AND status IN ('scheduled', 'sending')");
    let started = std::time::Instant::now();
    loop {
        let row = sqlx::query(&pending_sql)
            .bind(like.clone())
            .fetch_one(store.pool())
            .await
            .map_err(StoreError::db("bench: count pending"))?;
        if row.try_get::<i64, _>(0).map_err(StoreError::db("bench: count pending"))? == 0 {
            break;
        }
        cluster.check_all_alive()?;
        if started.elapsed() > opts.timeout {
            cluster.stop(Duration::from_secs(10)).await;
            anyhow::bail!("the drain did not finish within {:?}", opts.timeout);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let unclean = cluster.stop(Duration::from_secs(30)).await;
    if !unclean.is_empty() {
        anyhow::bail!("instances did not stop cleanly: {unclean:?}");
    }

    let latencies = run_latencies(&store, &like).await?;
    let last = sqlx::query(&dialect.sql(
        "SELECT MAX(s.created_at) FROM engagement_sends s JOIN engagement_outbox o ON o.id = s.outbox_id \
         WHERE o.dedupe_key LIKE ?",
    ))
    .bind(like.clone())
    .fetch_one(store.pool())
    .await
    .map_err(StoreError::db("bench: last outcome"))?;
    let last: Option<i64> = last.try_get(0).map_err(StoreError::db("bench: last outcome"))?;
    let drain = Millis(last.unwrap_or(t0.0)).since(t0);
    let not_sent = sqlx::query(
        &dialect.sql("SELECT COUNT(*) FROM engagement_outbox WHERE dedupe_key LIKE ? AND status <> 'sent'"),
    )
    .bind(like)
    .fetch_one(store.pool())
    .await
    .and_then(|r| r.try_get::<i64, _>(0))
    .map_err(StoreError::db("bench: count not sent"))?;
    store.close().await;

    let secs = drain.as_secs_f64();
    Ok(InstancesReport {
        database: dialect.to_string(),
        instances: opts.instances,
        rows: opts.rows,
        batch: opts.batch,
        concurrency: opts.concurrency,
        drain_seconds: secs,
        drain_rows_per_sec: if secs > 0.0 { opts.rows as f64 / secs } else { 0.0 },
        latency_p50_ms: percentile(&latencies, 50.0).unwrap_or(0),
        latency_p99_ms: percentile(&latencies, 99.0).unwrap_or(0),
        latency_max_ms: latencies.last().copied().unwrap_or(0),
        sent: latencies.len(),
        not_sent,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        provider: sms.and_then(|double| ProviderRate::of(&double.arrivals())),
    })
}

async fn run_latencies(store: &SqlStore, like: &str) -> Result<Vec<i64>, StoreError> {
    let rows = sqlx::query(&store.dialect().sql(
        "SELECT s.created_at - o.due_at FROM engagement_sends s JOIN engagement_outbox o ON o.id = s.outbox_id \
         WHERE s.status = 'sent' AND o.dedupe_key LIKE ?",
    ))
    .bind(like.to_owned())
    .fetch_all(store.pool())
    .await
    .map_err(StoreError::db("bench: latencies"))?;
    crate::tooling::cluster::sorted_first_column(&rows, "bench: latencies")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_rate_counts_the_busiest_second() {
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Three in the first 900 ms, then one every second.
        let arrivals = [at(0), at(400), at(900), at(1900), at(2900)];
        let r = ProviderRate::of(&arrivals).expect("arrivals");
        assert_eq!(r.requests, 5);
        assert_eq!(r.max_in_any_second, 3);
        assert!((r.per_second - 4.0 / 2.9).abs() < 1e-9, "{}", r.per_second);
        assert!(ProviderRate::of(&[]).is_none());
    }
}
