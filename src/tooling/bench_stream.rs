//! `herald bench-stream`: messages per second through the inbox stream to many
//! concurrent connections, and the server's memory per open connection.
//!
//! Runs a real `herald serve` as a child process on loopback (a fresh SQLite
//! file in a temporary directory), so the server's memory is measured apart
//! from the clients', which live in this process. Messages go the whole way:
//! `POST /v1/triggers` → planner → worker → inbox → stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;

use crate::clock::{Clock, SystemClock};
use crate::domain::UserId;
use crate::http::user_auth::TokenKey;

#[derive(Debug, Clone)]
pub struct StreamBenchOptions {
    pub connections: usize,
    pub rounds: usize,
}

#[derive(Debug, Serialize)]
pub struct StreamBenchReport {
    pub connections: usize,
    pub messages: usize,
    pub seconds: f64,
    pub messages_per_sec: f64,
    pub server_rss_before_kib: u64,
    pub server_rss_connected_kib: u64,
    pub server_kib_per_connection: f64,
    pub cores: usize,
}

const SECRET: &str = "bench-stream-secret-with-at-least-32-characters";

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

async fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let end = Instant::now() + within;
    while !done() {
        if Instant::now() > end {
            anyhow::bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

pub async fn run(opts: &StreamBenchOptions) -> anyhow::Result<StreamBenchReport> {
    let dir = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let base = format!("http://127.0.0.1:{port}");
    let envs = [
        ("HERALD_DATABASE_URL", format!("sqlite://{}", dir.path().join("bench.db").display())),
        ("HERALD_INBOX__TOKEN_SECRET", SECRET.to_owned()),
        ("HERALD_LOG", "warn".to_owned()),
    ];
    let key_out =
        std::process::Command::new(&exe).args(["keys", "create", "--name", "bench"]).envs(envs.clone()).output()?;
    anyhow::ensure!(key_out.status.success(), "keys create failed: {}", String::from_utf8_lossy(&key_out.stderr));
    let key = String::from_utf8(key_out.stdout)?.trim().to_owned();
    let mut server = tokio::process::Command::new(&exe)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .envs(envs)
        .kill_on_drop(true)
        .spawn()?;
    let pid = server.id().unwrap_or(0);
    let http = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    let start = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        anyhow::ensure!(start.elapsed() < Duration::from_secs(20), "herald serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rule = serde_json::json!({
        "name": "bench", "trigger_type": "bench.ping", "channel": "inbox", "category": "bench", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "ping {{ payload.n }}", "text": "t"}}}
    });
    let resp = http.post(format!("{base}/v1/rules")).bearer_auth(&key).json(&rule).send().await?;
    anyhow::ensure!(resp.status().is_success(), "creating the rule failed: {}", resp.text().await?);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before = rss_kib(pid);

    // Open the streams, one user each, and count what arrives.
    let tokens = TokenKey::new(SECRET.as_bytes());
    let expires = SystemClock.now().plus(Duration::from_secs(3600));
    let connected = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(AtomicUsize::new(0));
    let mut readers = tokio::task::JoinSet::new();
    let stream_client = reqwest::Client::builder().pool_max_idle_per_host(0).build()?;
    for i in 0..opts.connections {
        let token = tokens.issue(&UserId::parse("user", &format!("u{i}"))?, expires);
        let (client, url, connected, received) =
            (stream_client.clone(), format!("{base}/v1/inbox/stream"), connected.clone(), received.clone());
        readers.spawn(async move {
            let Ok(resp) = client.get(url).bearer_auth(token).send().await else { return };
            let mut body = resp.bytes_stream();
            let mut first = true;
            while let Some(Ok(chunk)) = body.next().await {
                if first {
                    connected.fetch_add(1, Ordering::SeqCst);
                    first = false;
                }
                let text = String::from_utf8_lossy(&chunk);
                received.fetch_add(text.matches("event: message").count(), Ordering::SeqCst);
            }
        });
    }
    wait_until("every stream to connect", Duration::from_secs(60), || {
        connected.load(Ordering::SeqCst) >= opts.connections
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_connected = rss_kib(pid);

    // Fire one trigger per user per round, 32 requests in flight.
    let started = Instant::now();
    let total = opts.connections * opts.rounds;
    let fire = futures::stream::iter((0..total).map(|n| {
        let (http, base, key) = (http.clone(), base.clone(), key.clone());
        async move {
            let body = serde_json::json!({"type": "bench.ping", "user_id": format!("u{}", n % opts.connections), "payload": {"n": n}});
            http.post(format!("{base}/v1/triggers")).bearer_auth(key).json(&body).send().await.map(|r| r.status())
        }
    }))
    .buffer_unordered(32)
    .collect::<Vec<_>>();
    let statuses = fire.await;
    anyhow::ensure!(statuses.iter().all(|s| matches!(s, Ok(s) if s.as_u16() == 202)), "some triggers were refused");
    wait_until("every message to reach its stream", Duration::from_secs(300), || {
        received.load(Ordering::SeqCst) >= total
    })
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    readers.abort_all();
    let _ = server.kill().await;
    Ok(StreamBenchReport {
        connections: opts.connections,
        messages: total,
        seconds,
        messages_per_sec: total as f64 / seconds,
        server_rss_before_kib: rss_before,
        server_rss_connected_kib: rss_connected,
        server_kib_per_connection: rss_connected.saturating_sub(rss_before) as f64 / opts.connections as f64,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}
