//! Support for the chaos and database-fault tests: knobs, output folders,
//! and private PostgreSQL and MariaDB servers a test may stop, start and cut
//! connections on. (The SMTP sink is `common::smtp`, shared with the email
//! tests.)
//!
//! The private servers exist because the shared ones (5432, 3306) carry
//! every other test on this machine: restarting them would fail those tests
//! for reasons that are not theirs. A private server costs an `initdb` (about
//! two seconds) and is torn down by `Drop`, so a failing test leaves no
//! server running.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// An integer knob from the environment (`HERALD_TEST_*`, which Herald's
/// configuration ignores), or `default`.
pub fn knob(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not accepted; expected a whole number")),
        Err(_) => default,
    }
}

/// `test-output/NAME` in the repository, emptied: where instance logs and
/// reports go, so a failing CI run leaves them to read.
pub fn output_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("test-output").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Polls `check` every 100 ms until it is true, at most `timeout`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < timeout, "waited {timeout:?} for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A PostgreSQL server of our own: `initdb` in a temporary directory, a free
/// port on 127.0.0.1, trust authentication. PostgreSQL refuses to run as
/// root, so as root its commands run as the `postgres` user, which owns the
/// directory.
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

impl PrivatePostgres {
    /// `None` outside CI when no PostgreSQL server binaries are installed.
    pub fn start() -> Option<PrivatePostgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|versions| {
            let mut v: Vec<PathBuf> = versions.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).collect();
            v.sort();
            v.pop().filter(|b| b.join("initdb").exists())
        });
        let Some(bin) = bin else {
            assert!(!in_ci(), "CI=true but no PostgreSQL server binaries under /usr/lib/postgresql/*/bin");
            return None;
        };
        let dir = tempfile::Builder::new().prefix("herald-pg-").tempdir().unwrap();
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown").args(["postgres:", &dir.path().display().to_string()]), "chown");
        }
        let pg = PrivatePostgres { dir, bin, port: free_port(), as_postgres };
        pg.pg("initdb", &["-D", &pg.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        pg.start_again();
        Some(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn pg(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args).stdin(Stdio::null());
        run(&mut cmd, &format!("{tool} {}", args.join(" ")));
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again) and waits until it accepts connections.
    pub fn start_again(&self) {
        let opts =
            format!("-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", self.port, self.dir.path().display());
        let log = self.dir.path().join("server.log").display().to_string();
        self.pg("pg_ctl", &["-D", &self.data(), "-o", &opts, "-l", &log, "-w", "-t", "60", "start"]);
    }

    /// A fast shutdown: sessions are terminated, the server stops listening.
    pub fn stop(&self) {
        self.pg("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "-t", "60", "stop"]);
    }

    /// Terminates every client session but ours: Herald's pools and its
    /// LISTEN connection see their sockets closed under them.
    pub async fn cut_connections(&self) -> i64 {
        let pool = admin_pool(&self.url()).await;
        let rows: Vec<(bool,)> = sqlx::query_as(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows.iter().filter(|(ok,)| *ok).count() as i64
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let exe = self.bin.join("pg_ctl");
        let data = self.data();
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let _ = cmd
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

async fn admin_pool(url: &str) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot reach {url}: {e}"))
}

/// A MariaDB server of our own: `mariadb-install-db` in a temporary
/// directory, `mariadbd` on a free port on 127.0.0.1 with grant tables
/// skipped (no passwords: it listens on loopback only and lives for one test).
pub struct PrivateMariaDb {
    dir: tempfile::TempDir,
    pub port: u16,
    child: Option<std::process::Child>,
}

impl PrivateMariaDb {
    /// `None` outside CI when MariaDB's server is not installed.
    pub async fn start() -> Option<PrivateMariaDb> {
        if !Path::new("/usr/sbin/mariadbd").exists() {
            assert!(!in_ci(), "CI=true but /usr/sbin/mariadbd is not installed");
            return None;
        }
        let dir = tempfile::Builder::new().prefix("herald-mariadb-").tempdir().unwrap();
        let data = dir.path().join("data").display().to_string();
        run(
            Command::new("mariadb-install-db").args([
                "--no-defaults",
                &format!("--datadir={data}"),
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]),
            "mariadb-install-db",
        );
        let mut db = PrivateMariaDb { dir, port: free_port(), child: None };
        db.start_again().await;
        let pool = admin_pool(&db.admin_url()).await;
        sqlx::query("CREATE DATABASE herald").execute(&pool).await.unwrap();
        pool.close().await;
        Some(db)
    }

    fn admin_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/herald", self.port)
    }

    /// Starts `mariadbd` (again) and waits until it accepts connections.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "the private MariaDB is already running");
        let d = self.dir.path();
        let child = Command::new("/usr/sbin/mariadbd")
            .args([
                "--no-defaults",
                &format!("--datadir={}", d.join("data").display()),
                &format!("--port={}", self.port),
                "--bind-address=127.0.0.1",
                &format!("--socket={}", d.join("mysqld.sock").display()),
                &format!("--pid-file={}", d.join("mysqld.pid").display()),
                &format!("--log-error={}", d.join("error.log").display()),
                "--user=root",
                "--skip-grant-tables",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=64M",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting mariadbd");
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                break;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let log = std::fs::read_to_string(d.join("error.log")).unwrap_or_default();
                panic!("mariadbd exited ({status}) while starting:\n{log}");
            }
            assert!(started.elapsed() < Duration::from_secs(60), "mariadbd did not listen within 60s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A clean shutdown (SIGTERM, as an init system does), waited for.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills every client connection but ours.
    pub async fn cut_connections(&self) -> i64 {
        let pool = admin_pool(&self.admin_url()).await;
        let ids: Vec<(i64,)> = sqlx::query_as(
            "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
             WHERE id <> CONNECTION_ID() AND command <> 'Daemon' AND user <> 'system user'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let mut killed = 0;
        for (id,) in ids {
            // A connection may end by itself between the list and the kill.
            if sqlx::query(&format!("KILL {id}")).execute(&pool).await.is_ok() {
                killed += 1;
            }
        }
        pool.close().await;
        killed
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
