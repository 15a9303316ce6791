//! Events in commit order, as a careful user checks it:
//! two instances on one database deliver and accept API writes at once,
//! while a follower reads `GET /v1/events/stream` a little at a time,
//! hanging up and resuming with `Last-Event-ID` on the other instance each
//! time. It must see every event exactly once, in order.
//!
//! Before positions were handed out in commit order, ids were UUIDv7 taken
//! at insert time: a transaction that took its id first and committed last
//! was skipped by a follower that had already read past it (46 of 2,100
//! events missed on PostgreSQL with two instances).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{TestDb, row};
use futures::StreamExt;
use herald::clock::{Clock, SystemClock};
use herald::store::{ConnectOptions, EventStore, RecipientStore, SqlStore, Store};
use tokio_util::sync::CancellationToken;

backend_tests!(a_follower_resuming_on_either_instance_sees_every_event_once_in_commit_order);

const ROWS: usize = 600;
const SUPPRESSIONS: usize = 60;

struct Instance {
    base: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start_instance(db: &TestDb, store: SqlStore) -> Instance {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut config = common::app::test_config(db);
    config.worker.enabled = true;
    // Small batches and a short poll: many transactions, interleaved
    // between the two instances, each a chance to commit out of order.
    config.worker.batch = 7;
    config.worker.poll = Duration::from_millis(50);
    config.worker.concurrency.insert("inbox".into(), 4);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(herald::app::serve_until(config, store, listener, shutdown.clone()));
    Instance { base, shutdown, task }
}

/// The next event that has an id (outcomes, suppressions), or `None` when
/// nothing arrives within `within`.
async fn next_event(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    buf: &mut String,
    within: Duration,
) -> Option<(i64, String)> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut kind, mut id) = (String::new(), None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    kind = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                }
            }
            if kind != "ready"
                && let Some(id) = id
            {
                return Some((id.parse().expect("an event id is its position"), kind));
            }
        }
        let chunk = tokio::time::timeout_at(deadline, stream.next()).await.ok()??.ok()?;
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

async fn a_follower_resuming_on_either_instance_sees_every_event_once_in_commit_order(db: &TestDb) {
    let (key, api_key) = herald::http::auth::generate("tests", SystemClock.now());
    db.store.insert_api_key(&api_key).await.unwrap();
    // Two instances, each with its own pool, as two processes would have.
    let second = SqlStore::connect(&db.url, &ConnectOptions::default()).await.unwrap();
    let instances = [start_instance(db, db.store.clone()).await, start_instance(db, second).await];
    let http = reqwest::Client::new();

    // The load: inbox rows for many users, delivered by both workers, and
    // suppressions posted to both instances while they deliver.
    let now = SystemClock.now();
    let rows: Vec<_> = (0..ROWS).map(|i| row(&format!("user-{}", i % 97), "inbox", now)).collect();
    for chunk in rows.chunks(50) {
        db.store.enqueue(chunk, now).await.unwrap();
    }
    let posts = {
        let (http, key) = (http.clone(), key.clone());
        let bases: Vec<String> = instances.iter().map(|i| i.base.clone()).collect();
        tokio::spawn(async move {
            for i in 0..SUPPRESSIONS {
                let resp = http
                    .post(format!("{}/v1/suppressions", bases[i % 2]))
                    .bearer_auth(&key)
                    .json(&serde_json::json!({"email": format!("person{i}@example.com"), "reason": "complaint"}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status().as_u16(), 201, "{}", resp.text().await.unwrap());
            }
        })
    };

    // The follower: a few events per connection, then resume on the other
    // instance from the last id it saw.
    let expected = ROWS + SUPPRESSIONS;
    let mut seen: Vec<i64> = Vec::new();
    let mut last: Option<i64> = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut connection = 0usize;
    while seen.len() < expected && tokio::time::Instant::now() < deadline {
        let base = &instances[connection % 2].base;
        let mut req = http.get(format!("{base}/v1/events/stream?from=start")).bearer_auth(&key);
        if let Some(id) = last {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let mut stream = resp.bytes_stream();
        let mut buf = String::new();
        let take = 1 + (connection * 7) % 23;
        for _ in 0..take {
            let Some((position, _kind)) = next_event(&mut stream, &mut buf, Duration::from_secs(3)).await else {
                break;
            };
            seen.push(position);
            last = Some(position);
        }
        connection += 1;
    }
    posts.await.unwrap();

    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice ({} repeats)", seen.len() - unique.len());
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in commit order");
    let table: Vec<i64> = db.store.events_after(0, 100_000).await.unwrap().iter().map(|e| e.position).collect();
    let missing: Vec<&i64> = table.iter().filter(|p| !unique.contains(p)).collect();
    assert_eq!(table.len(), expected, "one event per outcome and per suppression");
    assert!(missing.is_empty(), "{} of {} events never reached the follower: {missing:?}", missing.len(), expected);
    assert!(connection > 20, "the follower resumed {connection} times");

    for i in instances {
        i.shutdown.cancel();
        i.task.await.unwrap().unwrap();
    }
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
