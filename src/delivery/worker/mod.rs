//! The worker: claim due rows, hand each to its channel, record the outcome.
//!
//! [`Worker::tick`] is one sweep and can be driven alone (tests call it until
//! the outbox is empty); [`Worker::run`] is the pipelined loop a service
//! runs.
//!
//! The ground rules: claiming is a compare-and-set, never a held lock or
//! `SKIP LOCKED`; a missing channel ends the row `failed` and says so; a
//! channel that errors or panics is a transient failure, not a crashed tick;
//! the batch is a bound, not a target; retry is flat. On top of them: each channel
//! is a lane with its own queue (see `lane`); one statement claims a batch;
//! every write after it is fenced by the claim's token; the outcome and its
//! send-log row commit together, and outcomes from concurrent deliveries
//! share transactions; a batch is composed with a fixed number of queries;
//! rows past their grace window expire; deliveries run concurrently up to a
//! per-channel limit; the next batch is claimed while the current one
//! delivers; an inbox row is claimed, delivered and recorded in one
//! transaction; an enqueue wakes the worker at once; shutdown puts back what
//! it did not finish.
//!
//! A row's fate has two names on its way, the channel's `Outcome` and the
//! store's `RecordAction`; [`policy`] says why there are no others.

mod follow_ups;
mod lane;
pub mod lease;
mod maintenance;
pub mod policy;
mod record;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::address::AddressKeys;
use crate::clock::Clock;
use crate::delivery::channel::{Lookup, Registry};
use crate::delivery::compose::Composer;
use crate::metrics::Metrics;
use crate::store::{InstanceIdentity, OutboxRow, Store, StoreError};
use lane::Lane;
use lease::Lease;
use record::InFlight;

/// The worker's settings (each documented, with its default, in
/// `config::WorkerSettings`).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Longest sleep between sweeps when nothing wakes the worker sooner.
    pub poll: Duration,
    /// Most rows one sweep claims. A bound rather than a target: an unbounded
    /// batch is how a backlog turns one tick into a stall.
    pub batch: u32,
    pub max_attempts: u32,
    pub retry: Duration,
    /// How long a claim may look alive before it is taken back. Comfortably
    /// longer than the slowest legitimate send, or a slow one is sent twice.
    pub stale: Duration,
    /// One delivery taking longer than this is abandoned as a retry. Keeps a
    /// hung relay from holding a claim until it goes stale.
    pub deliver_timeout: Duration,
    /// On shutdown, how long in-flight deliveries may take to finish before
    /// they are abandoned and their rows put back.
    pub shutdown_grace: Duration,
    /// Concurrent deliveries per channel, so one slow relay cannot stall the
    /// in-app inbox. Channels not named get `default_concurrency`.
    pub concurrency: BTreeMap<String, usize>,
    pub default_concurrency: usize,
    /// How long this instance's lease lasts without a renewal (renewed every
    /// third of it). An instance that cannot renew starts no new delivery,
    /// and the rows of one whose lease lapsed are taken back after the
    /// lease plus `deliver_timeout`: a killed instance or a lost database
    /// node costs its rows about that long, not `stale`.
    pub lease: Duration,
    /// The zone of recipients without one, for send windows and quiet hours.
    pub default_timezone: chrono_tz::Tz,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            poll: Duration::from_secs(30),
            batch: 100,
            max_attempts: 5,
            retry: Duration::from_secs(5 * 60),
            stale: Duration::from_secs(15 * 60),
            deliver_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            concurrency: BTreeMap::new(),
            default_concurrency: 16,
            lease: Duration::from_secs(20),
            default_timezone: chrono_tz::Tz::UTC,
        }
    }
}

/// What one sweep did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct TickReport {
    pub reclaimed: u64,
    pub claimed: usize,
    pub sent: usize,
    pub failed: usize,
    pub suppressed: usize,
    pub bounced: usize,
    pub expired: usize,
    pub cancelled: usize,
    pub retried: usize,
    /// Rows a send window, quiet hours or an escalation's wait put back,
    /// their attempt not counted (see [`crate::domain::HoldReason`]).
    pub held: usize,
    /// Outcomes not recorded because the claim had been taken back: the newer
    /// attempt owns the row.
    pub lost_claim: usize,
    /// Rows put back unfinished because the worker is shutting down.
    pub released: usize,
    /// Rows whose outcome could not be written (the database was away); they
    /// stay claimed and are taken back after the stale window.
    pub unrecorded: usize,
}

impl TickReport {
    pub fn finished(&self) -> usize {
        self.sent + self.failed + self.suppressed + self.bounced + self.expired + self.cancelled
    }

    fn is_empty(&self) -> bool {
        *self == TickReport::default()
    }

    fn add(&mut self, other: &TickReport) {
        self.reclaimed += other.reclaimed;
        self.claimed += other.claimed;
        self.sent += other.sent;
        self.failed += other.failed;
        self.suppressed += other.suppressed;
        self.bounced += other.bounced;
        self.expired += other.expired;
        self.cancelled += other.cancelled;
        self.retried += other.retried;
        self.held += other.held;
        self.lost_claim += other.lost_claim;
        self.released += other.released;
        self.unrecorded += other.unrecorded;
    }
}

/// Rows this worker has finished since it started, for `herald bench` and
/// the periodic log line.
#[derive(Debug, Default)]
pub struct Totals {
    pub claimed: AtomicU64,
    /// Rows that reached a terminal status (any), recorded.
    pub finished: AtomicU64,
    pub sent: AtomicU64,
}

#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    registry: Registry,
    clock: Arc<dyn Clock>,
    config: WorkerConfig,
    metrics: Metrics,
    limits: HashMap<String, Arc<Semaphore>>,
    default_limit: Arc<Semaphore>,
    /// One per channel this instance can deliver on.
    lanes: Vec<Arc<Lane>>,
    composer: Composer,
    /// Outcomes from concurrent deliveries, group-committed (see `batch`).
    recorder: record::Recorder,
    totals: Totals,
    /// What the run loop did since its last log line.
    progress: Mutex<TickReport>,
    /// This instance's lease, in a service; `None` (tests, `herald bench`):
    /// deliveries need no lease and claims name no instance.
    lease: Option<Arc<Lease>>,
}

/// What a worker is built from, each part named where a worker is made.
///
/// One struct rather than a constructor per combination (`new`, one with
/// the address keys, one with a lease) taking six or seven positional
/// arguments: two `Arc`s or two `Option`s in swapped places still
/// compiled, and a new dependency meant yet another constructor.
pub struct WorkerParts {
    /// Where rows are claimed and outcomes recorded. A leased worker's
    /// store must claim for the same instance
    /// ([`crate::store::SqlStore::for_instance`]).
    pub store: Arc<dyn Store>,
    /// The channels this instance delivers on; a due row of any other is
    /// ended with the registry's reason (see `maintenance`).
    pub registry: Registry,
    /// The worker's time: the database's in a service
    /// ([`crate::clock::DbClock`]), a manual one in tests.
    pub clock: Arc<dyn Clock>,
    pub config: WorkerConfig,
    pub metrics: Metrics,
    /// The keys that hash email addresses, put on the email outcomes
    /// decided before the channel runs (an opt-out, a frequency cap, a
    /// template that fails, a grace window that ended), so `herald sends
    /// --address` finds them. `None` only where nothing reads the log by
    /// address (tests, `herald bench`); required with a `lease`, and
    /// [`Worker::new`] refuses a leased worker without them: when a
    /// service's worker was built without them, every such outcome was
    /// missing from the by-address log, and nothing failed.
    pub address_keys: Option<AddressKeys>,
    /// A service's worker holds a lease as this instance (renewed by
    /// [`Worker::run`]; see [`lease`]) and starts deliveries only while it
    /// does. `None` (tests, `herald bench`): deliveries need no lease and
    /// claims name no instance.
    pub lease: Option<InstanceIdentity>,
}

impl Worker {
    /// A worker from its parts.
    ///
    /// # Panics
    ///
    /// With a `lease` but no `address_keys`: a service's worker without
    /// them loses outcomes from the by-address log silently, so it does
    /// not start at all.
    pub fn new(parts: WorkerParts) -> Worker {
        let WorkerParts { store, registry, clock, config, metrics, address_keys: keys, lease } = parts;
        assert!(
            lease.is_none() || keys.is_some(),
            "a leased (service) worker needs the address keys: its early outcomes would be missing from the by-address log"
        );
        let lease = lease.map(|who| Arc::new(Lease::new(who, config.lease)));
        // A channel with a limit of its own (email) gets no more slots than
        // it has: the rest would only wait inside the channel, claimed and
        // counted as being delivered.
        let slots = |name: &str| {
            let configured = config.concurrency.get(name).copied().unwrap_or(config.default_concurrency);
            let own = match registry.lookup(name) {
                Lookup::Ready(handler) => handler.concurrency(),
                Lookup::Missing(_) => None,
            };
            own.map_or(configured, |own| configured.min(own)).max(1)
        };
        let limits: HashMap<String, Arc<Semaphore>> =
            registry.names().map(|name| (name.to_owned(), Arc::new(Semaphore::new(slots(name))))).collect();
        let default_limit = Arc::new(Semaphore::new(config.default_concurrency.max(1)));
        let lanes = registry
            .names()
            .filter_map(|name| match registry.lookup(name) {
                Lookup::Ready(handler) => Some(Arc::new(Lane::new(name, handler.clone(), slots(name)))),
                Lookup::Missing(_) => None,
            })
            .collect();
        let recorder = record::recorder(store.clone(), clock.clone());
        let composer = Composer::new(store.clone(), keys).with_default_timezone(config.default_timezone);
        Worker {
            inner: Arc::new(Inner {
                store,
                registry,
                clock,
                config,
                metrics,
                limits,
                default_limit,
                lanes,
                composer,
                recorder,
                totals: Totals::default(),
                progress: Mutex::new(TickReport::default()),
                lease,
            }),
        }
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.inner.config
    }

    /// What this worker has done since it started.
    pub fn totals(&self) -> &Totals {
        &self.inner.totals
    }

    /// One sweep, with no shutdown in view.
    pub async fn tick(&self) -> Result<TickReport, StoreError> {
        self.tick_until(&CancellationToken::new()).await
    }

    /// One sweep: take back stale claims, plan the escalation follow-ups
    /// that fell due, then a batch from each channel's
    /// lane (and the due rows of channels this instance does not have),
    /// deliver them, record, and wait for all of it.
    ///
    /// If `shutdown` fires meanwhile, rows still waiting for a delivery slot
    /// are put back at once, in-flight deliveries get `shutdown_grace` to
    /// finish, and whatever is still running after that is abandoned and put
    /// back, so nothing this instance owns is left in `sending`.
    pub async fn tick_until(&self, shutdown: &CancellationToken) -> Result<TickReport, StoreError> {
        let reclaimed = self.rescue().await + self.reclaim().await;
        let mut report = TickReport { reclaimed, ..TickReport::default() };
        if shutdown.is_cancelled() || !self.may_start() {
            return Ok(report);
        }
        self.plan_follow_ups().await?;
        let mut inflight = InFlight::new();
        for lane in &self.inner.lanes {
            if lane.direct {
                if let Some(batch) = self.direct_batch(lane, self.inner.config.batch, &[], None).await? {
                    report.claimed += batch.rows.len();
                    batch.finish(&mut report).await;
                }
            } else {
                let claimed = self.claim_lane(lane, self.inner.config.batch).await?;
                report.claimed += claimed.rows.len();
                report.released += self.dispatch(claimed, shutdown, &mut inflight).await;
            }
        }
        let unknown = self.claim_unknown().await?;
        report.claimed += unknown.rows.len();
        report.released += self.dispatch(unknown, shutdown, &mut inflight).await;
        self.finish_inflight(&mut inflight, shutdown, &mut report).await;
        Ok(report)
    }

    /// Works until `shutdown` fires: every lane on its own, each sleeping,
    /// when nothing is due, until the earliest of its next row falling due,
    /// an enqueue in this process (or, on PostgreSQL, in another instance),
    /// or `poll`; and, every few seconds, the stale claims and the rows of
    /// channels this instance does not have.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        tracing::info!(
            poll = ?inner.config.poll,
            batch = inner.config.batch,
            max_attempts = inner.config.max_attempts,
            lanes = ?inner.lanes.iter().map(|l| l.channel.as_str()).collect::<Vec<_>>(),
            "outbox worker started"
        );
        // Take the lease before any task starts: otherwise the first round
        // of each finds it not yet held, and `maintain` (which then sleeps
        // for several seconds) would leave the rows of channels this
        // instance lacks waiting that long after every start. If the
        // database is away, `keep_lease` goes on trying.
        let first_renewal = match &inner.lease {
            Some(lease) => match self.heartbeat().await {
                Ok(_) => lease.renew_every(),
                Err(e) => {
                    tracing::warn!(instance = lease.instance(), error = %e, "could not take the lease; trying again");
                    Duration::ZERO
                }
            },
            None => Duration::ZERO,
        };
        let mut tasks = tokio::task::JoinSet::new();
        for lane in &inner.lanes {
            let (worker, lane, shutdown) = (self.clone(), lane.clone(), shutdown.clone());
            if lane.direct {
                tasks.spawn(async move { worker.run_direct_lane(lane, shutdown).await });
            } else {
                tasks.spawn(async move { worker.run_claimed_lane(lane, shutdown).await });
            }
        }
        {
            let (worker, shutdown) = (self.clone(), shutdown.clone());
            tasks.spawn(async move { worker.maintain(shutdown).await });
        }
        {
            let (worker, shutdown) = (self.clone(), shutdown.clone());
            tasks.spawn(async move { worker.run_follow_ups(shutdown).await });
        }
        if let Some(lease) = &inner.lease {
            let (worker, lease, shutdown) = (self.clone(), lease.clone(), shutdown.clone());
            tasks.spawn(async move { worker.keep_lease(&lease, first_renewal, shutdown).await });
        }
        // One enqueue signal; every lane is woken by it.
        let wake = inner.store.enqueued_signal();
        let mut summary = tokio::time::interval(SUMMARY_EVERY);
        summary.tick().await;
        loop {
            tokio::select! {
                _ = wake.notified() => inner.lanes.iter().for_each(|l| l.wake.notify_one()),
                _ = summary.tick() => self.log_progress(),
                _ = shutdown.cancelled() => break,
            }
        }
        while tasks.join_next().await.is_some() {}
        if let Some(lease) = &inner.lease {
            // Nothing of this instance is in flight any more: give the
            // lease up, so rows it could not put back are rescued at once.
            if let Err(e) = inner.store.end_lease(lease.instance()).await {
                tracing::warn!(error = %e, "could not give up the lease; it lapses by itself");
            }
        }
        self.log_progress();
        tracing::info!("outbox worker stopped");
    }

    /// Whether this instance may start a delivery now: it holds its lease
    /// (or has none to hold).
    pub(crate) fn may_start(&self) -> bool {
        self.inner.lease.as_ref().is_none_or(|l| l.is_held(self.inner.clock.now()))
    }

    /// Waits for the row tasks; on shutdown gives them `shutdown_grace`,
    /// then abandons the rest and puts their rows back (their attempt
    /// stands: the delivery may have reached the user).
    async fn finish_inflight(&self, inflight: &mut InFlight, shutdown: &CancellationToken, report: &mut TickReport) {
        let grace = tokio::time::sleep(Duration::MAX);
        tokio::pin!(grace);
        let mut draining = false;
        loop {
            tokio::select! {
                joined = inflight.set.join_next_with_id() => match joined {
                    None => break,
                    Some(joined) => inflight.joined(joined, report),
                },
                _ = shutdown.cancelled(), if !draining => {
                    draining = true;
                    grace.as_mut().reset(tokio::time::Instant::now() + self.inner.config.shutdown_grace);
                }
                _ = &mut grace, if draining => {
                    tracing::warn!(rows = inflight.claims.len(), "shutdown grace ended; abandoning in-flight deliveries");
                    inflight.set.abort_all();
                    while let Some(joined) = inflight.set.join_next_with_id().await {
                        if let Ok((task, result)) = joined {
                            inflight.claims.remove(&task);
                            record::tally(report, result);
                        }
                    }
                    break;
                }
            }
        }
        let abandoned: Vec<(String, String)> = inflight.claims.drain().map(|(_, claim)| claim).collect();
        if abandoned.is_empty() {
            return;
        }
        match self.inner.store.release_many(&abandoned, false, self.inner.clock.now()).await {
            Ok(_) => report.released += abandoned.len(),
            Err(e) => {
                tracing::error!(rows = abandoned.len(), error = %e, "could not put back interrupted rows");
                report.unrecorded += abandoned.len();
            }
        }
    }

    /// Puts back rows whose delivery never started, refunding the attempt.
    async fn release_unstarted(&self, token: &str, rows: &[OutboxRow]) -> usize {
        let claims: Vec<(String, String)> = rows.iter().map(|r| (r.id.clone(), token.to_owned())).collect();
        match self.inner.store.release_many(&claims, true, self.inner.clock.now()).await {
            Ok(_) => rows.len(),
            Err(e) => {
                tracing::error!(rows = rows.len(), error = %e, "could not put back unstarted rows");
                0
            }
        }
    }

    /// Adds to what the run loop reports in its next log line.
    fn progress(&self, f: impl FnOnce(&mut TickReport)) {
        f(&mut self.inner.progress.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// One INFO line with what the worker did since the last one, as fields.
    fn log_progress(&self) {
        let r = std::mem::take(&mut *self.inner.progress.lock().unwrap_or_else(PoisonError::into_inner));
        if r.is_empty() {
            return;
        }
        tracing::info!(
            sent = r.sent,
            failed = r.failed,
            suppressed = r.suppressed,
            bounced = r.bounced,
            expired = r.expired,
            cancelled = r.cancelled,
            retried = r.retried,
            held = r.held,
            lost_claim = r.lost_claim,
            reclaimed = r.reclaimed,
            released = r.released,
            unrecorded = r.unrecorded,
            "outbox worker progress"
        );
    }
}

/// How often the run loop logs what it did, when it did anything.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Worker, WorkerConfig, WorkerParts};
    use crate::address::AddressKeys;
    use crate::clock::{ManualClock, Millis};
    use crate::metrics::Metrics;
    use crate::store::{ConnectOptions, InstanceIdentity, SqlStore};

    async fn parts(address_keys: Option<AddressKeys>) -> (WorkerParts, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
        let who = InstanceIdentity { id: "i".into(), host: "test".into(), pid: 1, started_at: Millis(0) };
        let parts = WorkerParts {
            store: Arc::new(store.for_instance("i")),
            registry: crate::app::registry(),
            clock: Arc::new(ManualClock::at(Millis(0))),
            config: WorkerConfig::default(),
            metrics: Metrics::new(),
            address_keys,
            lease: Some(who),
        };
        (parts, dir)
    }

    /// A service's worker without the keys would leave its early email
    /// outcomes out of the by-address log without a word: it does not start.
    #[tokio::test]
    #[should_panic(expected = "needs the address keys")]
    async fn a_leased_worker_without_address_keys_is_refused() {
        let (parts, _dir) = parts(None).await;
        Worker::new(parts);
    }

    #[tokio::test]
    async fn a_leased_worker_with_address_keys_is_built() {
        let (parts, _dir) = parts(Some(AddressKeys::from_secret(b"worker test secret"))).await;
        assert!(!Worker::new(parts).may_start(), "no delivery before the first renewal of the lease");
    }
}
