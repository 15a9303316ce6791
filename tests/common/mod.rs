//! Test support: a fresh, private database per test on each backend.
//!
//! SQLite gets a file in a temporary directory. PostgreSQL gets its own schema
//! in the database named by `HERALD_TEST_POSTGRES_URL`, MariaDB/MySQL its own
//! database on the server named by `HERALD_TEST_MYSQL_URL`, so tests run in
//! parallel without seeing each other's rows. Without those variables the
//! PostgreSQL and MySQL cases are skipped with a notice, except under
//! `CI=true`, where an unreachable backend fails the run.
#![allow(dead_code)]

pub mod app;
pub mod smtp;

use std::sync::Arc;

use herald::channel::{Channel, Delivery, Outcome, Registry};
use herald::clock::{Clock, ManualClock, Millis};
use herald::domain::{ChannelName, UserId};
use herald::metrics::Metrics;
use herald::store::{ConnectOptions, NewOutboxRow, OutboxRow, SqlStore, Store, new_id};
use herald::worker::{Worker, WorkerConfig};
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

fn server_url(backend: Backend) -> Option<String> {
    let var = match backend {
        Backend::Sqlite => return None,
        Backend::Postgres => "HERALD_TEST_POSTGRES_URL",
        Backend::MySql => "HERALD_TEST_MYSQL_URL",
    };
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if in_ci() => panic!("CI=true but {var} is not set: the {backend:?} backend must be tested in CI"),
        _ => None,
    }
}

fn unique_name() -> String {
    format!("herald_t_{}", uuid::Uuid::now_v7().simple())
}

impl TestDb {
    /// A migrated, empty store on `backend`, or `None` when that backend is
    /// not configured outside CI.
    pub async fn new(backend: Backend) -> Option<TestDb> {
        sqlx::any::install_default_drivers();
        let db = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("herald.db").display());
                let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
                TestDb { store, url, backend, cleanup: None, _dir: Some(dir) }
            }
            Backend::Postgres => {
                let Some(base) = server_url(backend) else {
                    eprintln!("skipped on PostgreSQL: set HERALD_TEST_POSTGRES_URL to run it");
                    return None;
                };
                let name = unique_name();
                let admin = connect_admin(&base).await;
                admin.execute(format!("CREATE SCHEMA {name}").as_str()).await.unwrap();
                admin.close().await;
                let sep = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{sep}options=-c%20search_path%3D{name}");
                let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
                TestDb { store, url, backend, cleanup: Some((base, name)), _dir: None }
            }
            Backend::MySql => {
                let Some(base) = server_url(backend) else {
                    eprintln!("skipped on MySQL: set HERALD_TEST_MYSQL_URL to run it");
                    return None;
                };
                let name = unique_name();
                let admin = connect_admin(&base).await;
                admin.execute(format!("CREATE DATABASE {name}").as_str()).await.unwrap();
                admin.close().await;
                let url = replace_database(&base, &name);
                let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
                TestDb { store, url, backend, cleanup: Some((base, name)), _dir: None }
            }
        };
        db.store.migrate().await.expect("migrate");
        Some(db)
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
            let admin = connect_admin(base).await;
            let sql = match self.backend {
                Backend::Postgres => format!("DROP SCHEMA {name} CASCADE"),
                _ => format!("DROP DATABASE {name}"),
            };
            let _ = admin.execute(sql.as_str()).await;
            admin.close().await;
        }
    }
}

async fn connect_admin(url: &str) -> sqlx::AnyPool {
    let attempt = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect(url)
        .await;
    match attempt {
        Ok(p) => p,
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

/// Instantiates each listed async test once per backend:
/// `backend_tests!(name, ...)` expects `async fn name(db: &TestDb)`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::common::TestDb::new($crate::common::Backend::Sqlite).await.unwrap();
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::new($crate::common::Backend::Postgres).await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::new($crate::common::Backend::MySql).await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

pub fn user(s: &str) -> UserId {
    UserId::parse("user_id", s).unwrap()
}

/// A row due at `due_at` on `channel` for `user_id`.
pub fn row(user_id: &str, channel: &str, due_at: Millis) -> NewOutboxRow {
    let id = new_id();
    NewOutboxRow {
        dedupe_key: format!("test:{id}"),
        id,
        rule_id: None,
        trigger_id: None,
        user_id: user(user_id),
        channel: ChannelName::parse("channel", channel).unwrap(),
        payload: serde_json::json!({ "title": "hello" }),
        due_at,
        expires_at: None,
    }
}

pub const T0: Millis = Millis(1_800_000_000_000);

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

pub fn worker(store: Arc<dyn Store>, registry: Registry, clock: &ManualClock, config: WorkerConfig) -> Worker {
    let clock: Arc<dyn Clock> = Arc::new(clock.clone());
    Worker::new(store, registry, clock, config, Metrics::new())
}
