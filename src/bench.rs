//! `herald bench`: how fast the worker drains the outbox on this machine.
//!
//! Enqueues N inbox rows (or, with `--channel email --smtp-url URL`, email
//! rows sent to that server, pooled or one connection per message), then drives the worker's sweep until the outbox is
//! empty, timing both phases. It drives `tick()` directly rather than the
//! polling loop, so the figure is the engine's rate, not the poll interval's.
//! It uses a fresh temporary SQLite file unless given a database URL; with a
//! URL it expects a scratch database, since it drains whatever is due there.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::{Clock, SystemClock};
use crate::domain::{ChannelName, UserId};
use crate::metrics::Metrics;
use crate::store::{ConnectOptions, NewOutboxRow, SqlStore, Store, new_id};
use crate::worker::{Worker, WorkerConfig};

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub rows: usize,
    pub database_url: Option<String>,
    pub batch: u32,
    pub concurrency: usize,
    /// `inbox` or `email`.
    pub channel: String,
    /// Where email goes (`email` only).
    pub smtp_url: Option<String>,
    /// Pooled SMTP connections (`email` only).
    pub pool: bool,
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
    pub sweeps: usize,
    /// Rows the sweeps reported as sent: should equal `rows`.
    pub sent: usize,
    pub cores: usize,
}

pub async fn run(opts: &BenchOptions) -> anyhow::Result<BenchReport> {
    let tmp = tempfile::tempdir()?;
    let url = match &opts.database_url {
        Some(u) => u.clone(),
        None => format!("sqlite://{}", tmp.path().join("bench.db").display()),
    };
    let store = SqlStore::connect(&url, &ConnectOptions { max_connections: 10, ..Default::default() }).await?;
    store.migrate().await?;
    let store: Arc<dyn Store> = Arc::new(store);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);

    let now = clock.now();
    let user = UserId::parse("bench", "bench-user")?;
    let email = opts.channel == "email";
    if !email && opts.channel != "inbox" {
        anyhow::bail!("--channel: {:?} is not accepted; expected inbox or email", opts.channel);
    }
    let channel = ChannelName::parse("channel", &opts.channel)?;
    let run_id = new_id();
    let rows: Vec<NewOutboxRow> = (0..opts.rows)
        .map(|i| NewOutboxRow {
            id: new_id(),
            dedupe_key: format!("bench:{run_id}:{i}"),
            rule_id: None,
            trigger_id: None,
            user_id: user.clone(),
            channel: channel.clone(),
            payload: if email {
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
        let channel = crate::channel::email::EmailChannel::from_settings(
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
        let registry = crate::app::registry_with_email(store.clone(), clock.clone(), Some(Arc::new(channel)));
        (registry, Some(transport))
    } else {
        (crate::app::registry(store.clone(), clock.clone()), None)
    };
    let worker = Worker::new(store.clone(), registry, clock.clone(), config, Metrics::new());
    let started = Instant::now();
    let (mut sweeps, mut sent) = (0, 0);
    loop {
        let report = worker.tick().await?;
        sweeps += 1;
        sent += report.sent;
        if report.claimed == 0 {
            break;
        }
    }
    let drain = started.elapsed();
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
        sweeps,
        sent,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

fn per_sec(rows: usize, d: Duration) -> f64 {
    if d.is_zero() { 0.0 } else { rows as f64 / d.as_secs_f64() }
}
