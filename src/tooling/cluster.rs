//! Several `herald serve` processes on one database, and an audit of what
//! they did: the harness behind the chaos and database-fault tests
//! (`tests/chaos.rs`, `tests/db_faults.rs`) and `herald bench --instances`.
//!
//! # Why real processes
//! Herald's scale-out promise is about processes: N instances against one
//! PostgreSQL or MariaDB, any of which may die at any instruction. Workers on
//! tasks inside one test process share a runtime and a memory, and cannot be
//! SIGKILLed between a provider's acceptance and the outcome's commit. So
//! [`Cluster`] starts the real binary, each instance on its own 127.0.0.1
//! port with its log in a file, and kills, restarts and stops them by pid.
//!
//! # Why the audit is SQL
//! [`audit`] reads the tables, not the processes' reports: a killed process
//! reports nothing, and the promise ("nothing acknowledged is lost, nothing
//! sent that should not be") is a statement about the rows. It assumes a
//! scratch database: no bounce or complaint appended later rows to the send
//! log.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::{AnyPool, Row};

use crate::store::StoreError;

/// What the harness could not do.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot start {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "instance {instance} did not answer /readyz with 200 within {waited:?}; the end of its log ({log}):\n{tail}"
    )]
    NotReady { instance: usize, waited: Duration, log: PathBuf, tail: String },
    #[error("instance {instance} exited by itself ({status}); the end of its log ({log}):\n{tail}")]
    Exited { instance: usize, status: String, log: PathBuf, tail: String },
    #[error("the outbox still had {remaining} non-terminal rows after {waited:?}")]
    NotDrained { remaining: i64, waited: Duration },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How to start the instances.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The `herald` binary (tests: `env!("CARGO_BIN_EXE_herald")`; the
    /// bench: its own executable).
    pub binary: PathBuf,
    /// The one database every instance uses. Migrated by the caller: the
    /// instances start with `--no-migrate`, so a restart does not contend
    /// for the migration lock with live instances.
    pub database_url: String,
    pub instances: usize,
    /// Logs go to `log_dir/instance-I.log` (every restart appends), and
    /// each instance runs there, so a generated secret file lands there too.
    pub log_dir: PathBuf,
    /// `HERALD_*` settings for every instance, e.g.
    /// `("HERALD_WORKER__STALE", "10s")`.
    pub env: Vec<(String, String)>,
    /// How long an instance may take to answer `/readyz` with 200.
    pub ready_timeout: Duration,
}

struct Instance {
    addr: SocketAddr,
    child: Option<tokio::process::Child>,
    starts: u32,
}

/// Running `herald serve` processes. Dropping it SIGKILLs whatever is still
/// running (so a failing test leaves no process behind); [`Cluster::stop`]
/// is the graceful end.
pub struct Cluster {
    opts: ClusterOptions,
    instances: Vec<Instance>,
    http: reqwest::Client,
}

impl Cluster {
    /// Starts every instance and waits until each answers `/readyz`.
    pub async fn start(opts: ClusterOptions) -> Result<Cluster, ClusterError> {
        std::fs::create_dir_all(&opts.log_dir)
            .map_err(|source| ClusterError::Io { what: format!("creating {}", opts.log_dir.display()), source })?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("a reqwest client with a timeout builds");
        let mut cluster = Cluster { instances: Vec::new(), opts, http };
        for _ in 0..cluster.opts.instances {
            let addr = free_local_addr()?;
            cluster.instances.push(Instance { addr, child: None, starts: 0 });
        }
        for i in 0..cluster.instances.len() {
            cluster.spawn(i)?;
        }
        for i in 0..cluster.instances.len() {
            cluster.wait_ready(i).await?;
        }
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// `http://127.0.0.1:PORT` of instance `i`.
    pub fn base_url(&self, i: usize) -> String {
        format!("http://{}", self.instances[i].addr)
    }

    pub fn log_path(&self, i: usize) -> PathBuf {
        self.opts.log_dir.join(format!("instance-{i}.log"))
    }

    /// Everything instance `i` logged, across its restarts.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(i)).unwrap_or_default()
    }

    /// The process id of instance `i`, while it runs (its lease row in
    /// `engagement_instances` carries it).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.instances[i].child.as_ref().and_then(|c| c.id())
    }

    /// How many times instance `i` was started.
    pub fn starts(&self, i: usize) -> u32 {
        self.instances[i].starts
    }

    fn spawn(&mut self, i: usize) -> Result<(), ClusterError> {
        let log_path = self.log_path(i);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| ClusterError::Io { what: format!("opening {}", log_path.display()), source })?;
        let err = log
            .try_clone()
            .map_err(|source| ClusterError::Io { what: format!("opening {}", log_path.display()), source })?;
        let inst = &mut self.instances[i];
        let mut cmd = tokio::process::Command::new(&self.opts.binary);
        // The caller's HERALD_* variables (a test runner's knobs, say) are
        // not this cluster's configuration; Herald refuses unknown keys.
        for (k, _) in std::env::vars() {
            if k.starts_with("HERALD_") {
                cmd.env_remove(k);
            }
        }
        cmd.current_dir(&self.opts.log_dir)
            .args(["serve", "--no-migrate", "--listen", &inst.addr.to_string()])
            .env("HERALD_DATABASE_URL", &self.opts.database_url)
            .env("HERALD_LOG", "info,sqlx=warn")
            .envs(self.opts.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|source| ClusterError::Spawn { binary: self.opts.binary.clone(), source })?;
        inst.child = Some(child);
        inst.starts += 1;
        Ok(())
    }

    /// `/readyz`'s status code from instance `i`, or `None` when it does
    /// not answer at all (not listening, or slower than the client's 10 s).
    pub async fn readyz(&self, i: usize) -> Option<u16> {
        let url = format!("{}/readyz", self.base_url(i));
        self.http.get(url).send().await.ok().map(|r| r.status().as_u16())
    }

    /// Waits (bounded by `ready_timeout`) until instance `i` answers 200.
    pub async fn wait_ready(&mut self, i: usize) -> Result<(), ClusterError> {
        let started = Instant::now();
        loop {
            self.check_alive(i)?;
            if self.readyz(i).await == Some(200) {
                return Ok(());
            }
            if started.elapsed() > self.opts.ready_timeout {
                return Err(ClusterError::NotReady {
                    instance: i,
                    waited: started.elapsed(),
                    log: self.log_path(i),
                    tail: tail(&self.log(i), 20),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// An error if instance `i` should be running and has exited by itself.
    pub fn check_alive(&mut self, i: usize) -> Result<(), ClusterError> {
        let exited = match self.instances[i].child.as_mut() {
            Some(child) => child.try_wait().map_err(|source| ClusterError::Io { what: "waitpid".into(), source })?,
            None => return Ok(()),
        };
        match exited {
            None => Ok(()),
            Some(status) => {
                self.instances[i].child = None;
                Err(ClusterError::Exited {
                    instance: i,
                    status: status.to_string(),
                    log: self.log_path(i),
                    tail: tail(&self.log(i), 20),
                })
            }
        }
    }

    /// [`Cluster::check_alive`] for every instance.
    pub fn check_all_alive(&mut self) -> Result<(), ClusterError> {
        (0..self.instances.len()).try_for_each(|i| self.check_alive(i))
    }

    /// SIGKILL: no shutdown handler runs, claims stay `sending` until
    /// another instance takes them back (its lease lapsed, or the stale
    /// window), exactly like a crash or an OOM kill.
    pub async fn kill(&mut self, i: usize) -> Result<(), ClusterError> {
        if let Some(mut child) = self.instances[i].child.take() {
            // tokio's `kill` is SIGKILL on Unix, and waits for the exit.
            child.kill().await.map_err(|source| ClusterError::Io { what: format!("killing instance {i}"), source })?;
            append_marker(&self.log_path(i), "=== harness: SIGKILL ===");
        }
        Ok(())
    }

    /// Starts instance `i` again on the same port and waits until it is ready.
    pub async fn restart(&mut self, i: usize) -> Result<(), ClusterError> {
        self.kill(i).await?;
        append_marker(&self.log_path(i), "=== harness: restart ===");
        self.spawn(i)?;
        self.wait_ready(i).await
    }

    /// SIGTERM to every instance, then waits up to `grace` for each to exit
    /// (SIGKILL after that). Returns the instances that did not exit
    /// cleanly, with how they ended.
    pub async fn stop(&mut self, grace: Duration) -> Vec<(usize, String)> {
        let mut unclean = Vec::new();
        for inst in &self.instances {
            if let Some(pid) = inst.child.as_ref().and_then(|c| c.id()) {
                // No signal crate for one call: kill(1) is everywhere Herald
                // runs, and the pid is our own child's.
                let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
            }
        }
        for (i, inst) in self.instances.iter_mut().enumerate() {
            let Some(mut child) = inst.child.take() else { continue };
            match tokio::time::timeout(grace, child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => unclean.push((i, status.to_string())),
                Ok(Err(e)) => unclean.push((i, e.to_string())),
                Err(_) => {
                    let _ = child.kill().await;
                    unclean.push((i, format!("still running {grace:?} after SIGTERM; killed")));
                }
            }
        }
        unclean
    }
}

fn free_local_addr() -> Result<SocketAddr, ClusterError> {
    // Bound and released at once: another process could take the port in
    // between, but then the instance fails to start and says so in its log.
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|source| ClusterError::Io { what: "finding a free port".into(), source })?;
    l.local_addr().map_err(|source| ClusterError::Io { what: "finding a free port".into(), source })
}

fn append_marker(path: &Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What the tables say after a run. Every field that names a violation must
/// be zero; the others are figures to report.
///
/// No count of inbox redeliveries: an inbox row is never claimed apart from
/// its outcome (the direct lane reads it with `Store::peek_channel`, and one
/// compare-and-set transaction claims it, writes the message and records
/// `sent`), so a kill leaves either all of that or none of it, and there is
/// no second delivery to count. The audit counted the send-log detail an
/// earlier design wrote when a redelivery found its message already there;
/// nothing writes that detail any more, so the count was zero by
/// construction and could not report anything. What a redelivery would break
/// is checked instead: `inbox_duplicated`, `inbox_missing` and
/// `inbox_unaccounted` are violations.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Audit {
    /// Rows per outbox status.
    pub by_status: BTreeMap<String, i64>,
    pub rows: i64,
    /// Violation: rows still `scheduled` or `sending`.
    pub non_terminal: i64,
    /// Violation: terminal rows with no send-log row.
    pub without_outcome: i64,
    /// Violation: rows with more than one send-log row (a second terminal
    /// outcome means a fence failed). A delivery report (`delivered`,
    /// `undelivered`) is a later row, not an outcome, and is not counted.
    pub extra_outcomes: i64,
    /// Violation: send-log rows whose status disagrees with their outbox
    /// row's (`bounced` may end a `failed` row; a delivery report is about a
    /// `sent` one).
    pub mismatched_outcome: i64,
    /// Violation: send-log rows for outbox rows that do not exist.
    pub orphan_outcomes: i64,
    /// `inbox` rows that ended `sent`.
    pub inbox_sent: i64,
    /// Violation: `sent` inbox rows with no message in the inbox.
    pub inbox_missing: i64,
    /// Violation: outbox rows with more than one inbox message (what the
    /// user would see as a duplicate).
    pub inbox_duplicated: i64,
    /// Violation: inbox messages whose outbox row did not end `sent` (or
    /// does not exist): the user got something the log says they did not.
    pub inbox_unaccounted: i64,
    /// Not a violation: rows claimed more than once (a kill, a stale
    /// reclaim, a retry).
    pub claimed_more_than_once: i64,
}

impl Audit {
    /// Every broken invariant, in words; empty when the run kept its promise.
    pub fn violations(&self) -> Vec<String> {
        let checks = [
            (self.non_terminal, "rows are still scheduled or sending"),
            (self.without_outcome, "terminal rows have no send-log row"),
            (self.extra_outcomes, "rows have more than one send-log row"),
            (self.mismatched_outcome, "send-log rows disagree with their outbox row's status"),
            (self.orphan_outcomes, "send-log rows name an outbox row that does not exist"),
            (self.inbox_missing, "sent inbox rows have no inbox message"),
            (self.inbox_duplicated, "outbox rows have more than one inbox message"),
            (self.inbox_unaccounted, "inbox messages belong to no sent outbox row"),
        ];
        checks.iter().filter(|(n, _)| *n != 0).map(|(n, what)| format!("{n} {what}")).collect()
    }
}

async fn count(pool: &AnyPool, sql: &str) -> Result<i64, StoreError> {
    let row = sqlx::query(sql).fetch_one(pool).await.map_err(StoreError::db("audit"))?;
    row.try_get::<i64, _>(0).map_err(StoreError::db("audit"))
}

/// Reads the invariants off the tables. Portable SQL, no dialect branches.
pub async fn audit(pool: &AnyPool) -> Result<Audit, StoreError> {
    let mut a = Audit::default();
    let rows = sqlx::query("SELECT status, COUNT(*) FROM engagement_outbox GROUP BY status")
        .fetch_all(pool)
        .await
        .map_err(StoreError::db("audit"))?;
    for row in rows {
        let status: String = row.try_get(0).map_err(StoreError::db("audit"))?;
        let n: i64 = row.try_get(1).map_err(StoreError::db("audit"))?;
        a.rows += n;
        if status == "scheduled" || status == "sending" {
            a.non_terminal += n;
        }
        a.by_status.insert(status, n);
    }
    a.without_outcome = count(
        pool,
        "SELECT COUNT(*) FROM engagement_outbox o WHERE o.status NOT IN ('scheduled', 'sending') \
         AND NOT EXISTS (SELECT 1 FROM engagement_sends s WHERE s.outbox_id = o.id)",
    )
    .await?;
    a.extra_outcomes = count(
        pool,
        "SELECT COUNT(*) FROM (SELECT outbox_id FROM engagement_sends WHERE status NOT IN ('delivered', 'undelivered') \
         GROUP BY outbox_id HAVING COUNT(*) > 1) t",
    )
    .await?;
    a.mismatched_outcome = count(
        pool,
        "SELECT COUNT(*) FROM engagement_sends s JOIN engagement_outbox o ON o.id = s.outbox_id \
         WHERE s.status <> o.status AND NOT (o.status = 'failed' AND s.status = 'bounced') \
         AND NOT (o.status = 'sent' AND s.status IN ('delivered', 'undelivered'))",
    )
    .await?;
    a.orphan_outcomes = count(
        pool,
        "SELECT COUNT(*) FROM engagement_sends s WHERE NOT EXISTS \
         (SELECT 1 FROM engagement_outbox o WHERE o.id = s.outbox_id)",
    )
    .await?;
    a.inbox_sent =
        count(pool, "SELECT COUNT(*) FROM engagement_outbox WHERE channel = 'inbox' AND status = 'sent'").await?;
    a.inbox_missing = count(
        pool,
        "SELECT COUNT(*) FROM engagement_outbox o WHERE o.channel = 'inbox' AND o.status = 'sent' \
         AND NOT EXISTS (SELECT 1 FROM engagement_inbox i WHERE i.outbox_id = o.id)",
    )
    .await?;
    a.inbox_duplicated = count(
        pool,
        "SELECT COUNT(*) FROM (SELECT outbox_id FROM engagement_inbox GROUP BY outbox_id HAVING COUNT(*) > 1) t",
    )
    .await?;
    a.inbox_unaccounted = count(
        pool,
        "SELECT COUNT(*) FROM engagement_inbox i WHERE NOT EXISTS \
         (SELECT 1 FROM engagement_outbox o WHERE o.id = i.outbox_id AND o.status = 'sent')",
    )
    .await?;
    a.claimed_more_than_once = count(pool, "SELECT COUNT(*) FROM engagement_outbox WHERE attempts > 1").await?;
    Ok(a)
}

/// Rows still `scheduled` or `sending`.
pub async fn non_terminal(pool: &AnyPool) -> Result<i64, StoreError> {
    count(pool, "SELECT COUNT(*) FROM engagement_outbox WHERE status IN ('scheduled', 'sending')").await
}

/// Polls (every 200 ms) until no row is `scheduled` or `sending`, at most
/// `timeout`. Database errors while polling are retried: the caller may be
/// waiting across an outage on purpose.
pub async fn wait_drained(pool: &AnyPool, timeout: Duration) -> Result<Duration, ClusterError> {
    let started = Instant::now();
    let mut remaining = -1;
    loop {
        match non_terminal(pool).await {
            Ok(0) => return Ok(started.elapsed()),
            Ok(n) => remaining = n,
            Err(e) => tracing::debug!(error = %e, "wait_drained: database not answering"),
        }
        if started.elapsed() > timeout {
            return Err(ClusterError::NotDrained { remaining, waited: started.elapsed() });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Delivery latency from the tables: for each `sent` row, when its outcome
/// was committed minus when it was due, in milliseconds, sorted.
pub async fn delivery_latencies_ms(pool: &AnyPool) -> Result<Vec<i64>, StoreError> {
    let rows = sqlx::query(
        "SELECT s.created_at - o.due_at FROM engagement_sends s JOIN engagement_outbox o ON o.id = s.outbox_id \
         WHERE s.status = 'sent'",
    )
    .fetch_all(pool)
    .await
    .map_err(StoreError::db("latencies"))?;
    sorted_first_column(&rows, "latencies")
}

/// The first column of `rows` as whole numbers, smallest first: latencies
/// ready for [`percentile`].
pub fn sorted_first_column(rows: &[sqlx::any::AnyRow], what: &'static str) -> Result<Vec<i64>, StoreError> {
    let mut v =
        rows.iter().map(|r| r.try_get::<i64, _>(0)).collect::<Result<Vec<_>, _>>().map_err(StoreError::db(what))?;
    v.sort_unstable();
    Ok(v)
}

/// The `p`-th percentile (0..=100) of sorted values, nearest rank.
pub fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn a_clean_audit_has_no_violations_and_each_broken_invariant_is_named() {
        let clean = Audit { rows: 10, inbox_sent: 10, claimed_more_than_once: 3, ..Audit::default() };
        assert!(clean.violations().is_empty());
        let broken = Audit { inbox_duplicated: 2, non_terminal: 1, ..clean };
        let v = broken.violations();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v.iter().any(|s| s == "2 outbox rows have more than one inbox message"), "{v:?}");
    }
}
