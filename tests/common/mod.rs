//! Test support: a fresh, private database per test on each backend.
//!
//! SQLite gets a file in a temporary directory. PostgreSQL gets its own schema
//! in the database named by `HERALD_TEST_POSTGRES_URL`, MariaDB/MySQL its own
//! database on the server named by `HERALD_TEST_MYSQL_URL`, so tests run in
//! parallel without seeing each other's rows. Without those variables the
//! usual local servers are tried (`postgres://postgres@127.0.0.1:5432/test`,
//! `mysql://root@127.0.0.1:3306/test`); when there is none, the PostgreSQL
//! and MySQL cases end *ignored*, with the reason (see [`harness`]), except
//! under `CI=true`, where a backend that cannot be reached fails the run.
#![allow(dead_code)]

pub mod app;
pub mod harness;
pub mod python;
pub mod slack;
pub mod smtp;
pub mod sse;
pub mod twilio;

use std::sync::Arc;

use herald::clock::{Clock, ManualClock, Millis};
use herald::delivery::channel::{Channel, Delivery, Outcome, Registry};
use herald::delivery::worker::{Worker, WorkerConfig, WorkerParts};
use herald::domain::{ChannelName, UserId};
use herald::metrics::Metrics;
use herald::planning::rule::RuleInput;
use herald::store::{ConnectOptions, NewOutboxRow, OutboxRow, RuleRow, RuleStore, SqlStore, Store, new_id};
use sqlx::Executor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

pub struct TestDb {
    pub store: SqlStore,
    pub url: String,
    backend: Backend,
    cleanup: Option<(String, String)>, // (admin url, name)
    _dir: Option<tempfile::TempDir>,
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The usual local server for a backend, tried when its variable is unset.
fn local_default(backend: Backend) -> (&'static str, &'static str, u16) {
    match backend {
        Backend::Postgres => ("HERALD_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test", 5432),
        Backend::MySql => ("HERALD_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test", 3306),
        Backend::Sqlite => unreachable!("SQLite needs no server"),
    }
}

/// What to do about a server backend, decided from its variable, whether
/// something answers on the usual local port, and `CI`.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerChoice {
    /// Test against this URL; `given` when the variable named it (a failure
    /// to connect is then the test's failure, not a reason to skip).
    Use { url: String, given: bool },
    /// End the test as ignored, with this reason.
    Skip(String),
    /// Fail the test: under CI every backend must be tested.
    Fail(String),
}

pub fn choose_server(backend: Backend, var_value: Option<&str>, listening: bool, ci: bool) -> ServerChoice {
    let (var, default, port) = local_default(backend);
    match (var_value.filter(|v| !v.is_empty()), listening, ci) {
        (Some(url), _, _) => ServerChoice::Use { url: url.to_owned(), given: true },
        (None, true, _) => ServerChoice::Use { url: default.to_owned(), given: false },
        (None, false, true) => {
            ServerChoice::Fail(format!("CI=true but {var} is not set and nothing answers on 127.0.0.1:{port}"))
        }
        (None, false, false) => {
            let server = if backend == Backend::Postgres { "PostgreSQL" } else { "MariaDB or MySQL" };
            ServerChoice::Skip(format!(
                "needs a {server} server: {var} is not set and nothing answers on 127.0.0.1:{port} (start one \
                 there, or set {var})"
            ))
        }
    }
}

/// [`choose_server`] for this process: `(url, given)`, or the test ends
/// ignored or failed. The port is probed once per process.
fn server_url(backend: Backend) -> (String, bool) {
    static PROBED: [std::sync::OnceLock<bool>; 2] = [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    let (var, _, port) = local_default(backend);
    let value = std::env::var(var).ok();
    let listening = value.as_deref().is_some_and(|v| !v.is_empty())
        || *PROBED[usize::from(backend == Backend::MySql)].get_or_init(|| {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(500)).is_ok()
        });
    match choose_server(backend, value.as_deref(), listening, in_ci()) {
        ServerChoice::Use { url, given } => (url, given),
        ServerChoice::Skip(reason) => harness::skip(reason),
        ServerChoice::Fail(message) => panic!("{message}"),
    }
}

fn unique_name() -> String {
    format!("herald_t_{}", uuid::Uuid::now_v7().simple())
}

impl TestDb {
    /// A migrated, empty store on `backend`. When that backend cannot be
    /// reached the test ends ignored (outside CI) or fails (under CI, or
    /// when its variable named a server).
    pub async fn new(backend: Backend) -> TestDb {
        let db = TestDb::unmigrated(backend).await;
        db.store.migrate().await.expect("migrate");
        db
    }

    /// As [`TestDb::new`], but with no migration applied: for the tests
    /// that migrate an older schema holding rows.
    #[allow(dead_code)] // not every test binary upgrades a database
    pub async fn unmigrated(backend: Backend) -> TestDb {
        sqlx::any::install_default_drivers();
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("herald.db").display());
                let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
                TestDb { store, url, backend, cleanup: None, _dir: Some(dir) }
            }
            Backend::Postgres => {
                let (base, given) = server_url(backend);
                let name = unique_name();
                let admin = connect_admin(&base, given).await;
                admin.execute(format!("CREATE SCHEMA {name}").as_str()).await.unwrap();
                admin.close().await;
                let sep = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{sep}options=-c%20search_path%3D{name}");
                let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
                TestDb { store, url, backend, cleanup: Some((base, name)), _dir: None }
            }
            Backend::MySql => {
                let (base, given) = server_url(backend);
                let name = unique_name();
                let admin = connect_admin(&base, given).await;
                admin.execute(format!("CREATE DATABASE {name}").as_str()).await.unwrap();
                admin.close().await;
                let url = replace_database(&base, &name);
                let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
                TestDb { store, url, backend, cleanup: Some((base, name)), _dir: None }
            }
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn arc(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    /// A second, independent pool on the same database: another "instance".
    pub async fn another_instance(&self) -> SqlStore {
        SqlStore::connect(&self.url, &ConnectOptions::default()).await.unwrap()
    }

    /// Drops the schema or database. Called at the end of a passing test; a
    /// failing one leaves its data behind to look at.
    pub async fn cleanup(self) {
        self.store.close().await;
        if let Some((base, name)) = &self.cleanup {
            let admin = connect_admin(base, true).await;
            let sql = match self.backend {
                Backend::Postgres => format!("DROP SCHEMA {name} CASCADE"),
                _ => format!("DROP DATABASE {name}"),
            };
            let _ = admin.execute(sql.as_str()).await;
            admin.close().await;
        }
    }
}

/// The admin connection that creates a test's schema or database. A server
/// found on the usual port that will not take this login is a reason to
/// skip (outside CI); one the variable named is a reason to fail.
async fn connect_admin(url: &str, given: bool) -> sqlx::AnyPool {
    let attempt = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect(url)
        .await;
    match attempt {
        Ok(p) => p,
        Err(e) if !given && !in_ci() => {
            let var = if url.starts_with("postgres") { "HERALD_TEST_POSTGRES_URL" } else { "HERALD_TEST_MYSQL_URL" };
            harness::skip(format!(
                "a server answers for {url} but refuses the login ({e}): set {var} to a URL it accepts"
            ))
        }
        Err(e) => panic!("cannot reach the test database at {url}: {e}"),
    }
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..path_start], name);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Instantiates each listed async test once per backend, as
/// `fn backend_trials() -> Vec<Trial>` for the suite's `main` (see
/// [`harness`]): `backend_tests!(name, ...)` expects
/// `async fn name(db: &TestDb)`, and names the cases `sqlite::name`,
/// `postgres::name` and `mysql::name`, so `cargo test --test worker postgres::`
/// runs one backend.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        fn backend_trials() -> Vec<$crate::common::harness::Trial> {
            use $crate::common::{Backend, TestDb, harness};
            let mut trials = Vec::new();
            for (prefix, backend) in [("sqlite", Backend::Sqlite), ("postgres", Backend::Postgres), ("mysql", Backend::MySql)] {
                $(
                    trials.push(harness::test(format!("{prefix}::{}", stringify!($name)), move || async move {
                        let db = TestDb::new(backend).await;
                        $name(&db).await;
                        db.cleanup().await;
                    }));
                )*
            }
            trials
        }
    };
}

/// Trials of each listed async test once per backend, for tests that start
/// their own server: `per_backend_tests![name, ...]` expects
/// `async fn name(backend: Backend)`, and names the cases as
/// [`backend_tests!`] does (`sqlite::name`, `postgres::name`, `mysql::name`).
#[macro_export]
macro_rules! per_backend_tests {
    ($($name:ident),* $(,)?) => {{
        use $crate::common::{Backend, harness};
        let mut trials: Vec<harness::Trial> = Vec::new();
        for (prefix, backend) in [("sqlite", Backend::Sqlite), ("postgres", Backend::Postgres), ("mysql", Backend::MySql)] {
            $(trials.push(harness::test(format!("{prefix}::{}", stringify!($name)), move || $name(backend)));)*
        }
        trials
    }};
}

/// The listed tests as trials named after their functions, for the suite's
/// `main`: `named_tests![a, #[sync] b]` is
/// `vec![harness::test("a", a), harness::sync_test("b", b)]`, so a test's
/// name is written once and cannot drift from its function.
#[macro_export]
macro_rules! named_tests {
    ($($(#[$kind:ident])? $name:ident),* $(,)?) => {
        vec![$($crate::named_test!($(#[$kind])? $name)),*]
    };
}

/// One entry of [`named_tests!`]: async unless marked `#[sync]`.
#[macro_export]
macro_rules! named_test {
    (#[sync] $name:ident) => {
        $crate::common::harness::sync_test(stringify!($name), $name)
    };
    ($name:ident) => {
        $crate::common::harness::test(stringify!($name), $name)
    };
}

pub fn user(s: &str) -> UserId {
    UserId::parse("user_id", s).unwrap()
}

/// A row due at `due_at` on `channel` for `user_id`.
pub fn row(user_id: &str, channel: &str, due_at: Millis) -> NewOutboxRow {
    let mut row = keyed_row(user_id, channel, String::new(), serde_json::json!({ "title": "hello" }), due_at);
    row.dedupe_key = format!("test:{}", row.id);
    row
}

/// A row of a bulk test: `user_id`'s message on `channel`, with its
/// `dedupe_key` and `payload`, due at `due_at`.
pub fn keyed_row(
    user_id: &str,
    channel: &str,
    dedupe_key: String,
    payload: serde_json::Value,
    due_at: Millis,
) -> NewOutboxRow {
    NewOutboxRow {
        id: new_id(),
        dedupe_key,
        rule_id: None,
        trigger_id: None,
        user_id: user(user_id),
        channel: ChannelName::parse("channel", channel).unwrap(),
        payload,
        due_at,
        expires_at: None,
        follow_up_at: None,
    }
}

/// `instances` of this build's `herald` on `database_url`, with `env`, each
/// logging to `log_dir` and ready within a minute.
pub async fn start_cluster(
    database_url: String,
    instances: usize,
    log_dir: std::path::PathBuf,
    env: Vec<(String, String)>,
) -> herald::tooling::cluster::Cluster {
    let (binary, ready_timeout) = (env!("CARGO_BIN_EXE_herald").into(), std::time::Duration::from_secs(60));
    let options =
        herald::tooling::cluster::ClusterOptions { binary, database_url, instances, log_dir, env, ready_timeout };
    herald::tooling::cluster::Cluster::start(options).await.unwrap()
}

/// Enqueues `rows` in statements of at most a thousand rows.
pub async fn enqueue_all(store: &dyn Store, rows: &[NewOutboxRow], now: Millis) {
    for chunk in rows.chunks(1000) {
        store.enqueue(chunk, now).await.unwrap();
    }
}

pub const T0: Millis = Millis(1_800_000_000_000);

/// A webhook delivery of `payload` to `url`, as the worker hands it over:
/// a claimed row and its rule.
pub fn webhook_delivery(url: &str, payload: &str) -> Delivery {
    let row = OutboxRow {
        id: "01a23720-c5ee-76eb-bb34-dc5abfe75cd5".into(),
        dedupe_key: "k".into(),
        rule_id: Some("rule-1".into()),
        trigger_id: Some("trig-1".into()),
        user_id: "u-1".into(),
        channel: "webhook".into(),
        payload: payload.into(),
        status: herald::domain::OutboxStatus::Sending,
        due_at: T0,
        expires_at: None,
        attempts: 1,
        last_error: None,
        claim_token: Some("t".into()),
        claimed_at: None,
        created_at: T0,
        updated_at: T0,
    };
    let rule = RuleRow {
        id: "rule-1".into(),
        name: "hook".into(),
        trigger_type: "order.shipped".into(),
        condition: None,
        channel: "webhook".into(),
        template: serde_json::json!({}),
        delay_seconds: 0,
        grace_seconds: None,
        category: "orders".into(),
        enabled: true,
        workflow: None,
        webhook_url: Some(url.into()),
        created_at: T0,
        updated_at: T0,
    };
    Delivery { row, rule: Some(Arc::new(rule)), recipient: None, message: None }
}

/// The moment an RFC 3339 time names.
pub fn at(s: &str) -> Millis {
    Millis(chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis())
}

/// An enabled inbox rule from API JSON (with `extra` fields merged in),
/// stored.
pub async fn add_rule(db: &TestDb, now: Millis, trigger_type: &str, extra: serde_json::Value) -> RuleRow {
    let mut body = serde_json::json!({
        "name": format!("rule for {trigger_type}"), "trigger_type": trigger_type, "channel": "inbox",
        "category": "news", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Hello", "text": "t"}}},
    });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let input: RuleInput = serde_json::from_value(body).unwrap();
    let row = input.into_row(now, &Default::default()).unwrap();
    db.store.insert_rule(&row).await.unwrap();
    row
}

/// Delivers `msg` as the worker's inbox lane does: its outbox row (id
/// `msg.outbox_id`, enqueued here, due `now`) is read with
/// [`Store::peek_channel`] and, in one transaction, claimed, recorded `sent`
/// and the message written ([`Store::record_outcomes`] with no claim token).
/// Returns the row.
pub async fn deliver_inbox(store: &dyn Store, msg: &herald::store::NewInboxMessage, now: Millis) -> OutboxRow {
    use herald::store::{Finish, Record, RecordAction};
    let mut new = row(&msg.user_id, "inbox", now);
    new.id = msg.outbox_id.clone();
    store.enqueue(std::slice::from_ref(&new), now).await.unwrap();
    let peeked = store.peek_channel("inbox", now, 10_000, &[], None).await.unwrap();
    let row = peeked.into_iter().find(|r| r.id == msg.outbox_id).expect("the row just enqueued is due");
    let sent = Finish {
        status: herald::domain::SendStatus::Sent,
        detail: None,
        transport: Some("inbox".into()),
        address_hash: None,
        provider_id: None,
    };
    let item = Record { row: row.clone(), token: None, action: RecordAction::Finish(sent), inbox: Some(msg.clone()) };
    assert_eq!(store.record_outcomes(&[item], now).await.unwrap(), [true], "delivered");
    row
}

/// A channel that answers what the test tells it to, counting calls.
pub struct ScriptedChannel {
    pub calls: std::sync::atomic::AtomicUsize,
    pub answer: Box<dyn Fn(&OutboxRow) -> Outcome + Send + Sync>,
}

impl ScriptedChannel {
    pub fn new(answer: impl Fn(&OutboxRow) -> Outcome + Send + Sync + 'static) -> Arc<ScriptedChannel> {
        Arc::new(ScriptedChannel { calls: Default::default(), answer: Box::new(answer) })
    }

    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Channel for ScriptedChannel {
    async fn deliver(&self, d: &Delivery) -> Outcome {
        let row = &d.row;
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (self.answer)(row)
    }
}

/// A worker on the system clock with the default settings and the built-in
/// channels, for a test that needs what is due delivered now.
pub fn system_worker(store: Arc<dyn Store>) -> Worker {
    Worker::new(WorkerParts {
        store,
        registry: herald::app::registry(),
        clock: Arc::new(herald::clock::SystemClock),
        config: WorkerConfig::default(),
        metrics: Metrics::new(),
        address_keys: None,
        lease: None,
    })
}

pub fn worker(store: Arc<dyn Store>, registry: Registry, clock: &ManualClock, config: WorkerConfig) -> Worker {
    let clock: Arc<dyn Clock> = Arc::new(clock.clone());
    Worker::new(WorkerParts {
        store,
        registry,
        clock,
        config,
        metrics: Metrics::new(),
        address_keys: None,
        lease: None,
    })
}

/// `herald sends` with `args` against the test's database: its standard
/// output, after checking that it succeeded.
pub fn herald_sends(db: &TestDb, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("sends")
        .args(args)
        .args(["--database-url", db.url.as_str()])
        .env_remove("HERALD_DATABASE_URL")
        .env("HERALD_LOG", "warn")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
