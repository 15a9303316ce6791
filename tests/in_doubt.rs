//! The in-doubt check of `POST /v1/triggers`: a batch of triggers whose
//! COMMIT got no answer is looked up before it is answered, so the answer
//! tells the truth (202 exactly for a trigger that is recorded) and nothing
//! is recorded twice.
//!
//! The server talks to PostgreSQL through a proxy in this test that reads
//! the wire protocol, recognises the COMMIT of a transaction that inserted
//! into `engagement_triggers`, and then, once, cuts every connection it
//! carries (as a failover does), either just before the COMMIT reaches the
//! server (the transaction rolls back) or just after (it commits, and its
//! answer is lost). Optionally it then refuses connections for a while, so
//! the instance cannot find out in time. `HERALD_TEST_PROXY_DEBUG=1` prints
//! the messages the proxy sees.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Backend, TestDb};
use herald::clock::{Clock, SystemClock};
use herald::store::{ConnectOptions, RecipientStore, SqlStore};
use sqlx::Row;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cut {
    /// The COMMIT never reaches the server.
    BeforeCommit,
    /// The COMMIT reaches the server and commits; its answer is lost.
    AfterCommit,
}

struct Fault {
    cut: Cut,
    /// After the cut, new connections are refused for this long.
    refuse_for: Duration,
}

#[derive(Default)]
struct ProxyState {
    armed: Mutex<Option<Fault>>,
    fired: AtomicU32,
    refuse_until: Mutex<Option<Instant>>,
    /// Cancelled to cut every connection at once; replaced after.
    cut_all: Mutex<CancellationToken>,
}

/// A TCP proxy to PostgreSQL that understands just enough of the protocol
/// (startup packet, then typed messages) to see Parse, Bind and Query.
struct Proxy {
    port: u16,
    state: Arc<ProxyState>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::default());
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                let refusing = st.refuse_until.lock().unwrap().is_some_and(|t| Instant::now() < t);
                if refusing {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                tokio::spawn(carry(client, server, st.clone()));
            }
        });
        Proxy { port, state }
    }

    fn arm(&self, cut: Cut, refuse_for: Duration) {
        *self.state.armed.lock().unwrap() = Some(Fault { cut, refuse_for });
    }

    fn fired(&self) -> u32 {
        self.state.fired.load(Ordering::SeqCst)
    }
}

async fn read_exact(r: &mut (impl AsyncReadExt + Unpin), n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; n];
    r.read_exact(&mut buf).await.ok()?;
    Some(buf)
}

fn cstr(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    (String::from_utf8_lossy(&bytes[..end]).into_owned(), bytes.get(end + 1..).unwrap_or_default())
}

async fn carry(client: TcpStream, server: TcpStream, st: Arc<ProxyState>) {
    let cut = st.cut_all.lock().unwrap().clone();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // Set when the answer to a COMMIT must not reach the client.
    let swallow = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swallow2 = swallow.clone();
    let down = async move {
        let mut buf = vec![0; 16384];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // A swallowed answer is read and dropped; the cut ends it all.
            if !swallow2.load(Ordering::SeqCst) && cw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let st2 = st.clone();
    let up = async move {
        // The startup packet (or SSLRequest, refused with sslmode=disable).
        let len = read_exact(&mut cr, 4).await?;
        let n = u32::from_be_bytes(len[..4].try_into().unwrap()) as usize;
        let body = read_exact(&mut cr, n - 4).await?;
        sw.write_all(&len).await.ok()?;
        sw.write_all(&body).await.ok()?;
        let mut trigger_statements: HashSet<String> = HashSet::new();
        let mut inserted_triggers = false;
        loop {
            let head = read_exact(&mut cr, 5).await?;
            let n = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
            let body = read_exact(&mut cr, n - 4).await?;
            if std::env::var_os("HERALD_TEST_PROXY_DEBUG").is_some() {
                eprintln!("proxy: {} {:?}", head[0] as char, String::from_utf8_lossy(&body[..body.len().min(60)]));
            }
            match head[0] {
                b'P' => {
                    let (name, rest) = cstr(&body);
                    let (sql, _) = cstr(rest);
                    if sql.contains("INSERT INTO engagement_triggers") {
                        trigger_statements.insert(name);
                        inserted_triggers = true;
                    } else {
                        trigger_statements.remove(&name);
                    }
                }
                b'B' => {
                    let (_portal, rest) = cstr(&body);
                    let (statement, _) = cstr(rest);
                    inserted_triggers |= trigger_statements.contains(&statement);
                }
                b'Q' => {
                    let (sql, _) = cstr(&body);
                    let sql = sql.trim().to_ascii_uppercase();
                    if sql.starts_with("COMMIT") || sql.starts_with("ROLLBACK") {
                        let fault = if inserted_triggers && sql.starts_with("COMMIT") {
                            st2.armed.lock().unwrap().take()
                        } else {
                            None
                        };
                        inserted_triggers = false;
                        if let Some(fault) = fault {
                            swallow.store(true, Ordering::SeqCst);
                            st2.fired.fetch_add(1, Ordering::SeqCst);
                            if fault.cut == Cut::AfterCommit {
                                sw.write_all(&head).await.ok()?;
                                sw.write_all(&body).await.ok()?;
                                // Let the server commit before the cut.
                                tokio::time::sleep(Duration::from_millis(300)).await;
                            }
                            *st2.refuse_until.lock().unwrap() = Some(Instant::now() + fault.refuse_for);
                            let all = std::mem::take(&mut *st2.cut_all.lock().unwrap());
                            all.cancel();
                            return None::<()>;
                        }
                    }
                }
                _ => {}
            }
            sw.write_all(&head).await.ok()?;
            sw.write_all(&body).await.ok()?;
        }
    };
    tokio::select! {
        _ = down => {}
        _ = up => {}
        _ = cut.cancelled() => {}
    }
}

struct Server {
    base: String,
    key: String,
    db: TestDb,
    proxy: Proxy,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    async fn start() -> Server {
        let db = TestDb::new(Backend::Postgres).await;
        let (key, row) = herald::http::auth::generate("in-doubt", SystemClock.now());
        db.store.insert_api_key(&row).await.unwrap();
        let url = url::Url::parse(&db.url).unwrap();
        let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
        let proxy = Proxy::start(upstream).await;
        let mut via = url.clone();
        via.set_host(Some("127.0.0.1")).unwrap();
        via.set_port(Some(proxy.port)).unwrap();
        via.query_pairs_mut().append_pair("sslmode", "disable");
        let store = SqlStore::connect(via.as_str(), &ConnectOptions::default()).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut config = common::app::test_config(&db);
        config.database_url = via.to_string();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(herald::app::serve_until(config, store, listener, shutdown.clone()));
        Server { base, key, db, proxy, shutdown, task }
    }

    /// Posts `n` triggers at once (so they share a batch), keyed `prefix:i`;
    /// the status of each answer.
    async fn post_triggers(&self, prefix: &str, n: usize) -> Vec<u16> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let calls = (0..n).map(|i| {
            let req = http.post(format!("{}/v1/triggers", self.base)).bearer_auth(&self.key).json(
                &serde_json::json!({"type": "doubt.test", "user_id": format!("u{i}"), "idempotency_key": format!("{prefix}:{i}")}),
            );
            async move { req.send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
        });
        futures::future::join_all(calls).await
    }

    /// How many triggers hold each idempotency key starting with `prefix`.
    async fn recorded(&self, prefix: &str) -> HashMap<String, i64> {
        let rows = sqlx::query(
            "SELECT idempotency_key, COUNT(*) FROM engagement_triggers WHERE idempotency_key LIKE $1 \
             GROUP BY idempotency_key",
        )
        .bind(format!("{prefix}:%"))
        .fetch_all(self.db.store.pool())
        .await
        .unwrap();
        rows.iter().map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1))).collect()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.task).await;
        self.db.cleanup().await;
    }
}

/// Every answer 202 and every trigger recorded exactly once.
fn assert_all_acknowledged_once(statuses: &[u16], recorded: &HashMap<String, i64>, prefix: &str) {
    assert!(statuses.iter().all(|s| *s == 202), "answers: {statuses:?}");
    assert_eq!(recorded.len(), statuses.len(), "every acknowledged trigger recorded: {recorded:?}");
    for i in 0..statuses.len() {
        assert_eq!(recorded.get(&format!("{prefix}:{i}")), Some(&1), "{prefix}:{i} recorded once");
    }
}

async fn a_commit_whose_answer_was_lost_is_found_and_acknowledged_once() {
    let server = Server::start().await;
    assert_eq!(server.post_triggers("warm", 1).await, vec![202]);
    server.proxy.arm(Cut::AfterCommit, Duration::ZERO);
    let statuses = server.post_triggers("after", 10).await;
    assert_eq!(server.proxy.fired(), 1, "the fault was not reached");
    assert_all_acknowledged_once(&statuses, &server.recorded("after").await, "after");
    server.stop().await;
}

async fn a_commit_that_never_arrived_is_recorded_again_once() {
    let server = Server::start().await;
    assert_eq!(server.post_triggers("warm", 1).await, vec![202]);
    server.proxy.arm(Cut::BeforeCommit, Duration::ZERO);
    let statuses = server.post_triggers("before", 10).await;
    assert_eq!(server.proxy.fired(), 1, "the fault was not reached");
    assert_all_acknowledged_once(&statuses, &server.recorded("before").await, "before");
    server.stop().await;
}

/// When the database stays away past the instance's 20 s wait it cannot
/// know: the answer is 503 (never 202 for a trigger it has not seen
/// recorded), and the client's retry with the same key is acknowledged
/// without doubling it. On PostgreSQL the intake writes up to three groups
/// at once, so the three requests may be split: a group whose COMMIT went
/// through on another connection before the cut (the proxy waits 300 ms
/// after forwarding the faulted COMMIT, so that the server commits it,
/// before it cuts every connection) is acknowledged, truthfully; the group
/// whose answer was cut is 503.
async fn a_commit_that_cannot_be_checked_in_time_is_503_and_its_retry_is_not_doubled() {
    let server = Server::start().await;
    assert_eq!(server.post_triggers("warm", 1).await, vec![202]);
    server.proxy.arm(Cut::AfterCommit, Duration::from_secs(25));
    let started = Instant::now();
    let statuses = server.post_triggers("away", 3).await;
    assert_eq!(server.proxy.fired(), 1, "the fault was not reached");
    assert!(statuses.contains(&503), "the cut group is answered 503: {statuses:?}");
    assert!(statuses.iter().all(|s| *s == 503 || *s == 202), "answers while the database is away: {statuses:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "answered after {:?}", started.elapsed());
    // It did commit: the 503 was "cannot tell", not "not recorded".
    let recorded = server.recorded("away").await;
    assert!(recorded.len() == 3 && recorded.values().all(|n| *n == 1), "{recorded:?}");
    while Instant::now() < started + Duration::from_secs(26) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = server.post_triggers("away", 3).await;
    assert_all_acknowledged_once(&again, &server.recorded("away").await, "away");
    server.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        a_commit_whose_answer_was_lost_is_found_and_acknowledged_once,
        a_commit_that_never_arrived_is_recorded_again_once,
        a_commit_that_cannot_be_checked_in_time_is_503_and_its_retry_is_not_doubled,
    ])
}
