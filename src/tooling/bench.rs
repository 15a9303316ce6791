//! `herald bench`: how fast the worker drains the outbox on this machine.
//!
//! Enqueues N inbox rows (or, with `--channel email --smtp-url URL`, email
//! rows sent to that server, pooled or one connection per message), then runs
//! the worker's loop, as `herald serve` does (claiming ahead, group-committing
//! outcomes), until every row is finished, timing both phases. The loop is
//! woken by the enqueue, so the figure is the engine's rate, not the poll
//! interval's. On PostgreSQL it also counts the database's commits during the
//! drain (`pg_stat_database.xact_commit`), since commits are what a batched
//! engine saves. It uses a fresh temporary SQLite file unless given a
//! database URL; with a URL it expects a scratch database, since it drains
//! whatever is due there.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::{Clock, SystemClock};
use crate::delivery::worker::{Worker, WorkerConfig, WorkerParts};
use crate::domain::{ChannelName, UserId};
use crate::metrics::Metrics;
use crate::store::{ConnectOptions, NewOutboxRow, SqlStore, Store, new_id};

use super::bench_push::{self, PushBench};

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub rows: usize,
    pub database_url: Option<String>,
    pub batch: u32,
    pub concurrency: usize,
    /// `inbox`, `email`, `push`, `sms` or `slack`.
    pub channel: String,
    /// Where email goes (`email` only).
    pub smtp_url: Option<String>,
    /// Pooled SMTP connections (`email` only).
    pub pool: bool,
    /// HTTP/2 to the push service (`push` only; HTTP/1.1 without).
    pub http2: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            rows: 10_000,
            database_url: None,
            batch: 100,
            concurrency: 16,
            channel: "inbox".into(),
            smtp_url: None,
            pool: true,
            http2: true,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub database: String,
    pub channel: String,
    /// For email: "smtp … pooled" or "smtp … one connection per message".
    pub transport: Option<String>,
    pub rows: usize,
    pub batch: u32,
    pub concurrency: usize,
    pub enqueue_seconds: f64,
    pub enqueue_rows_per_sec: f64,
    pub drain_seconds: f64,
    pub drain_rows_per_sec: f64,
    /// Rows the worker claimed (more than `rows` only if some were retried).
    pub claimed: u64,
    /// Rows the worker recorded as sent: should equal `rows`.
    pub sent: u64,
    /// Push only: what the receiver saw and what a notification costs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<super::bench_push::PushFigures>,
    /// SMS and Slack only: the requests the provider's double answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messaging: Option<super::bench_messaging::MessagingFigures>,
    /// PostgreSQL only: transactions the database committed during the
    /// drain, and that per row.
    pub pg_commits: Option<i64>,
    pub pg_commits_per_row: Option<f64>,
    pub cores: usize,
}

pub async fn run(opts: &BenchOptions) -> anyhow::Result<BenchReport> {
    let tmp = tempfile::tempdir()?;
    let url = match &opts.database_url {
        Some(u) => u.clone(),
        None => format!("sqlite://{}", tmp.path().join("bench.db").display()),
    };
    let sql_store = SqlStore::connect(&url, &ConnectOptions { max_connections: 10, ..Default::default() }).await?;
    sql_store.migrate().await?;
    let store: Arc<dyn Store> = Arc::new(sql_store.clone());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);

    let now = clock.now();
    let user = UserId::parse("bench", "bench-user")?;
    let email = opts.channel == "email";
    if !["inbox", "email", "push", "sms", "slack"].contains(&opts.channel.as_str()) {
        anyhow::bail!("--channel: {:?} is not accepted; expected inbox, email, push, sms or slack", opts.channel);
    }
    let messaging = match opts.channel.as_str() {
        c @ ("sms" | "slack") => Some(super::bench_messaging::MessagingBench::start(c, &store, clock.clone()).await?),
        _ => None,
    };
    let mut push = match opts.channel.as_str() {
        "push" => Some(PushBench::start(&store, clock.clone(), opts.rows, opts.concurrency, opts.http2).await?),
        _ => None,
    };
    let channel = ChannelName::parse("channel", &opts.channel)?;
    let run_id = new_id();
    let rows: Vec<NewOutboxRow> = (0..opts.rows)
        .map(|i| NewOutboxRow {
            id: new_id(),
            dedupe_key: format!("bench:{run_id}:{i}"),
            rule_id: None,
            trigger_id: None,
            user_id: if push.is_some() {
                UserId::parse("bench", &bench_push::user(i)).expect("a valid id")
            } else {
                user.clone()
            },
            channel: channel.clone(),
            payload: if push.is_some() {
                bench_push::payload(i)
            } else if messaging.is_some() {
                super::bench_messaging::payload(&opts.channel, i)
            } else if email {
                // A non-transactional category, so each message is signed an
                // unsubscribe token and carries List-Unsubscribe, as real mail does.
                serde_json::json!({
                    "to": format!("ok{i}@bench.invalid"), "subject": format!("bench message {i}"),
                    "text": "A benchmark message.", "html": "<p>A benchmark message.</p>", "category": "bench",
                })
            } else {
                serde_json::json!({ "title": format!("bench message {i}") })
            },
            due_at: now,
            expires_at: None,
            follow_up_at: None,
        })
        .collect();
    let started = Instant::now();
    for chunk in rows.chunks(1000) {
        store.enqueue(chunk, clock.now()).await?;
    }
    let enqueue = started.elapsed();

    let config = WorkerConfig { batch: opts.batch, default_concurrency: opts.concurrency, ..WorkerConfig::default() };
    let (registry, transport) = if email {
        let settings = crate::config::EmailSettings {
            transport: opts.smtp_url.clone(),
            from: Some("Herald bench <bench@herald.invalid>".into()),
            address_secret: Some("herald bench secret, not for production".into()),
            public_url: Some("https://herald.invalid".into()),
            pool: opts.pool,
            concurrency: u32::try_from(opts.concurrency).unwrap_or(u32::MAX).clamp(1, 1000),
            ..crate::config::EmailSettings::default()
        };
        let keys = crate::address::AddressKeys::from_secret(b"herald bench secret, not for production");
        let channel = crate::delivery::channel::email::EmailChannel::from_settings(
            &settings,
            "https://herald.invalid",
            store.clone(),
            clock.clone(),
            keys,
            Metrics::new(),
        )
        .map_err(|e| anyhow::anyhow!("--smtp-url: {e}"))?;
        let how = if opts.pool { "pooled" } else { "one connection per message" };
        let transport = format!("{} ({how})", channel.describe());
        let registry = crate::app::registry_with_email(Some(Arc::new(channel)));
        (registry, Some(transport))
    } else if let Some(push) = &push {
        let http = if opts.http2 { "HTTP/2" } else { "HTTP/1.1" };
        (push.registry(), Some(format!("Web Push over {http} to a local push service that verifies and decrypts")))
    } else if let Some(m) = &messaging {
        let to = if opts.channel == "sms" { "Twilio's Messages API" } else { "Slack's chat.postMessage" };
        (m.registry(), Some(format!("an in-process double of {to}")))
    } else {
        (crate::app::registry(), None)
    };
    let worker = Arc::new(Worker::new(WorkerParts {
        store: store.clone(),
        registry,
        clock: clock.clone(),
        config,
        metrics: Metrics::new(),
        address_keys: None,
        lease: None,
    }));
    let commits_before = pg_commits(&sql_store).await?;
    if let Some(push) = &mut push {
        push.drain_started();
    }
    let started = Instant::now();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = {
        let (worker, shutdown) = (worker.clone(), shutdown.clone());
        tokio::spawn(async move { worker.run(shutdown).await })
    };
    let rows = opts.rows as u64;
    let (mut seen, mut progress_at) = (0, Instant::now());
    loop {
        let finished = worker.totals().finished.load(Ordering::Relaxed);
        if finished >= rows {
            break;
        }
        if running.is_finished() {
            anyhow::bail!("the worker stopped before the outbox was drained ({finished} of {rows} rows finished)");
        }
        if finished != seen {
            (seen, progress_at) = (finished, Instant::now());
        } else if progress_at.elapsed() > STALL {
            shutdown.cancel();
            anyhow::bail!(
                "no row finished for {}s ({finished} of {rows} finished): the drain is stuck; see the log",
                STALL.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let drain = started.elapsed();
    shutdown.cancel();
    running.await?;
    let push = match &push {
        Some(p) => Some(p.finish(opts.rows)?),
        None => None,
    };
    let messaging = messaging.as_ref().map(super::bench_messaging::MessagingBench::finish);
    let commits = match commits_before {
        Some(before) => {
            // A backend reports its counts when it exits: close the pool
            // first, then read them on a fresh connection.
            sql_store.close().await;
            let reader = SqlStore::connect(&url, &ConnectOptions::default()).await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let after = pg_commits(&reader).await?.unwrap_or(before);
            reader.close().await;
            Some(after - before)
        }
        None => None,
    };
    Ok(BenchReport {
        database: store.dialect().to_string(),
        channel: opts.channel.clone(),
        transport,
        rows: opts.rows,
        batch: opts.batch,
        concurrency: opts.concurrency,
        enqueue_seconds: enqueue.as_secs_f64(),
        enqueue_rows_per_sec: per_sec(opts.rows, enqueue),
        drain_seconds: drain.as_secs_f64(),
        drain_rows_per_sec: per_sec(opts.rows, drain),
        claimed: worker.totals().claimed.load(Ordering::Relaxed),
        sent: worker.totals().sent.load(Ordering::Relaxed),
        push,
        messaging,
        pg_commits: commits,
        pg_commits_per_row: commits.map(|c| c as f64 / opts.rows.max(1) as f64),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

/// How long the drain may make no progress before the bench gives up.
const STALL: Duration = Duration::from_secs(60);

/// PostgreSQL's count of committed transactions in this database (`None`
/// on other databases).
pub(crate) async fn pg_commits(store: &SqlStore) -> anyhow::Result<Option<i64>> {
    if store.dialect() != crate::store::Dialect::Postgres {
        return Ok(None);
    }
    let row = sqlx::query("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        .fetch_one(store.pool())
        .await?;
    Ok(Some(sqlx::Row::try_get(&row, 0)?))
}

fn per_sec(rows: usize, d: Duration) -> f64 {
    if d.is_zero() { 0.0 } else { rows as f64 / d.as_secs_f64() }
}
