//! The worker: claim due rows, hand each to its channel, record the outcome.
//!
//! [`Worker::tick`] is one sweep and can be driven alone (tests call it until
//! the outbox is empty); [`Worker::run`] only decides when to call it next.
//!
//! Kept from the seed: claiming is a compare-and-set, never a held lock or
//! `SKIP LOCKED`; a missing channel ends the row `failed` and says so; a
//! channel that errors or panics is a transient failure, not a crashed tick;
//! the batch is a bound, not a target; retry is flat. Added: one statement
//! claims a batch; every write after it is fenced by the claim's token; the
//! outcome and its send-log row commit together; rows past their grace window
//! expire; deliveries run concurrently up to a per-channel limit; an enqueue
//! wakes the worker at once; shutdown puts back what it did not finish.

pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::batch::Batcher;
use crate::channel::{Lookup, Outcome, Registry};
use crate::clock::Clock;
use crate::compose::{Prepared, prepare};
use crate::metrics::Metrics;
use crate::store::{OutboxRow, Record, RecordAction, Store, StoreError, new_id};
use policy::{Decision, FinishSpec, RetryPolicy};

/// The worker's settings. Defaults are the seed's.
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
    pub retried: usize,
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
        self.sent + self.failed + self.suppressed + self.bounced + self.expired
    }
}

/// What became of one claimed row.
enum RowResult {
    Finished(crate::domain::SendStatus),
    Retried,
    LostClaim,
    Released,
    Unrecorded,
}

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
    /// Outcomes from concurrent deliveries, group-committed (see `batch`).
    recorder: Batcher<Record, Result<bool, Arc<StoreError>>>,
}

/// Most outcomes written in one transaction.
const RECORD_GROUP: usize = 256;

impl Worker {
    pub fn new(
        store: Arc<dyn Store>,
        registry: Registry,
        clock: Arc<dyn Clock>,
        config: WorkerConfig,
        metrics: Metrics,
    ) -> Worker {
        let limits = registry
            .names()
            .map(|name| {
                let n = config.concurrency.get(name).copied().unwrap_or(config.default_concurrency);
                (name.to_owned(), Arc::new(Semaphore::new(n.max(1))))
            })
            .collect();
        let default_limit = Arc::new(Semaphore::new(config.default_concurrency.max(1)));
        let recorder = {
            let (store, clock) = (store.clone(), clock.clone());
            Batcher::spawn(RECORD_GROUP, move |items: Vec<Record>| {
                let (store, clock) = (store.clone(), clock.clone());
                async move {
                    match store.record_outcomes(&items, clock.now()).await {
                        Ok(won) => won.into_iter().map(Ok).collect(),
                        Err(e) => {
                            let e = Arc::new(e);
                            items.iter().map(|_| Err(e.clone())).collect()
                        }
                    }
                }
            })
        };
        Worker { inner: Arc::new(Inner { store, registry, clock, config, metrics, limits, default_limit, recorder }) }
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.inner.config
    }

    /// One sweep, with no shutdown in view.
    pub async fn tick(&self) -> Result<TickReport, StoreError> {
        self.tick_until(&CancellationToken::new()).await
    }

    /// One sweep: take back stale claims, claim a batch, deliver it, record.
    ///
    /// If `shutdown` fires meanwhile, rows still waiting for a delivery slot
    /// are put back at once, in-flight deliveries get `shutdown_grace` to
    /// finish, and whatever is still running after that is abandoned and put
    /// back, so nothing this instance owns is left in `sending`.
    pub async fn tick_until(&self, shutdown: &CancellationToken) -> Result<TickReport, StoreError> {
        let inner = &self.inner;
        let mut report = TickReport::default();
        let now = inner.clock.now();

        // A failed reclaim must not stop delivery of what is due.
        match inner.store.reclaim_stale(now.minus(inner.config.stale), now).await {
            Ok(n) => {
                report.reclaimed = n;
                if n > 0 {
                    inner.metrics.reclaimed(n);
                    tracing::warn!(rows = n, "took back stale claims");
                }
            }
            Err(e) if e.is_contention() => {
                tracing::warn!(error = %e, "stale-claim reclaim lost a race with another instance; the next sweep retries")
            }
            Err(e) => tracing::error!(error = %e, "failed to reclaim stale rows"),
        }
        if shutdown.is_cancelled() {
            return Ok(report);
        }

        let token = new_id();
        let started = Instant::now();
        let rows = inner.store.claim_due(now, inner.config.batch, &token).await?;
        inner.metrics.claim_duration(started.elapsed().as_secs_f64());
        report.claimed = rows.len();
        if rows.is_empty() {
            return Ok(report);
        }

        let mut set = JoinSet::new();
        let mut pending: HashMap<tokio::task::Id, String> = HashMap::with_capacity(rows.len());
        for row in rows {
            inner.metrics.claim_latency(now.since(row.due_at).as_secs_f64());
            let id = row.id.clone();
            let handle = set.spawn(process_row(self.inner.clone(), row, token.clone(), shutdown.clone()));
            pending.insert(handle.id(), id);
        }

        let deadline = tokio::time::sleep(Duration::MAX);
        tokio::pin!(deadline);
        let mut draining = false;
        loop {
            tokio::select! {
                joined = set.join_next_with_id() => match joined {
                    None => break,
                    Some(Ok((task, result))) => {
                        pending.remove(&task);
                        tally(&mut report, result);
                    }
                    // A bug in our own code, not the channel's (those panics
                    // are caught in process_row). The row is put back below.
                    Some(Err(e)) => tracing::error!(error = %e, "row task failed"),
                },
                _ = shutdown.cancelled(), if !draining => {
                    draining = true;
                    deadline.as_mut().reset(tokio::time::Instant::now() + inner.config.shutdown_grace);
                }
                _ = &mut deadline, if draining => {
                    tracing::warn!(rows = pending.len(), "shutdown grace ended; abandoning in-flight deliveries");
                    set.abort_all();
                    while let Some(joined) = set.join_next_with_id().await {
                        if let Ok((task, result)) = joined {
                            pending.remove(&task);
                            tally(&mut report, result);
                        }
                    }
                    break;
                }
            }
        }
        // Whatever has no result was interrupted mid-delivery: it may have
        // reached the user, so the attempt stands.
        for id in pending.into_values() {
            match inner.store.release(&id, &token, false, inner.clock.now()).await {
                Ok(_) => report.released += 1,
                Err(e) => {
                    tracing::error!(outbox = %id, error = %e, "could not put back an interrupted row");
                    report.unrecorded += 1;
                }
            }
        }
        Ok(report)
    }

    /// Sweeps until `shutdown` fires. Sleeps until the earliest of: the next
    /// row falling due, an enqueue in this process (or, on PostgreSQL, in
    /// another instance), or `poll`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        let wake = inner.store.enqueued_signal();
        let mut backoff = Duration::from_millis(500);
        tracing::info!(
            poll = ?inner.config.poll,
            batch = inner.config.batch,
            max_attempts = inner.config.max_attempts,
            "outbox worker started"
        );
        while !shutdown.is_cancelled() {
            let pause = match self.tick_until(&shutdown).await {
                Ok(report) => {
                    backoff = Duration::from_millis(500);
                    if report.claimed > 0 || report.reclaimed > 0 {
                        tracing::info!(?report, "outbox swept");
                    }
                    if report.claimed as u32 >= inner.config.batch {
                        continue; // a backlog: go straight on
                    }
                    self.pause_until_next_due(report.claimed > 0).await
                }
                Err(e) => {
                    // The database is away: back off, doubling up to `poll`,
                    // and try again; the pool reconnects by itself.
                    tracing::error!(error = %e, retry_in = ?backoff, "outbox sweep failed");
                    let pause = backoff;
                    backoff = (backoff * 2).min(inner.config.poll);
                    pause
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = wake.notified() => {}
                _ = shutdown.cancelled() => {}
            }
        }
        tracing::info!("outbox worker stopped");
    }

    async fn pause_until_next_due(&self, claimed_some: bool) -> Duration {
        let inner = &self.inner;
        match inner.store.next_due_at().await {
            Ok(Some(next)) => {
                let now = inner.clock.now();
                if next <= now {
                    // Due rows remain: straight on if the last sweep made
                    // progress; otherwise another instance is on them, so
                    // do not spin.
                    if claimed_some { Duration::ZERO } else { Duration::from_millis(100) }
                } else {
                    next.since(now).min(inner.config.poll)
                }
            }
            Ok(None) => inner.config.poll,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the next due time");
                inner.config.poll
            }
        }
    }
}

fn tally(report: &mut TickReport, result: RowResult) {
    use crate::domain::SendStatus as S;
    match result {
        RowResult::Finished(S::Sent) => report.sent += 1,
        RowResult::Finished(S::Suppressed) => report.suppressed += 1,
        RowResult::Finished(S::Bounced) => report.bounced += 1,
        RowResult::Finished(S::Expired) => report.expired += 1,
        RowResult::Finished(_) => report.failed += 1,
        RowResult::Retried => report.retried += 1,
        RowResult::LostClaim => report.lost_claim += 1,
        RowResult::Released => report.released += 1,
        RowResult::Unrecorded => report.unrecorded += 1,
    }
}

/// Claim already won; deliver and record. One row, start to finish.
async fn process_row(inner: Arc<Inner>, row: OutboxRow, token: String, shutdown: CancellationToken) -> RowResult {
    let policy = RetryPolicy { max_attempts: inner.config.max_attempts, retry: inner.config.retry };

    if let Some(spec) = policy::before_delivery(&row, inner.clock.now(), policy) {
        return record(&inner, &row, &token, Decision::Finish(spec)).await;
    }

    let outcome = match inner.registry.lookup(&row.channel) {
        Lookup::Missing(detail) => Outcome::terminal(detail),
        Lookup::Ready(channel) => 'deliver: {
            let delivery = match prepare(inner.store.as_ref(), &row).await {
                Prepared::Deliver(d) => d,
                Prepared::Skip(outcome) => break 'deliver outcome,
            };
            let limit = inner.limits.get(&row.channel).unwrap_or(&inner.default_limit);
            let _permit = tokio::select! {
                permit = limit.acquire() => permit.expect("delivery semaphores are never closed"),
                _ = shutdown.cancelled() => {
                    // Never started: put it back without counting the attempt.
                    return match inner.store.release(&row.id, &token, true, inner.clock.now()).await {
                        Ok(_) => RowResult::Released,
                        Err(e) => {
                            tracing::error!(outbox = %row.id, error = %e, "could not put back an unstarted row");
                            RowResult::Unrecorded
                        }
                    };
                }
            };
            let attempt = AssertUnwindSafe(channel.deliver(&delivery)).catch_unwind();
            match tokio::time::timeout(inner.config.deliver_timeout, attempt).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(panic)) => {
                    let msg = panic_message(&panic);
                    tracing::error!(outbox = %row.id, channel = %row.channel, panic = %msg, "channel panicked");
                    Outcome::retry(format!("channel \"{}\" panicked: {msg}", row.channel))
                }
                Err(_) => Outcome::retry(format!(
                    "delivery did not finish within {}s",
                    inner.config.deliver_timeout.as_secs_f64()
                )),
            }
        }
    };
    inner.metrics.delivery(&row.channel, outcome_label(&outcome, &row, policy));
    let decision = policy::decide(outcome, &row, inner.clock.now(), policy);
    record(&inner, &row, &token, decision).await
}

fn outcome_label(outcome: &Outcome, row: &OutboxRow, policy: RetryPolicy) -> &'static str {
    match outcome {
        Outcome::Retry { .. } if row.attempts >= i64::from(policy.max_attempts) => "failed",
        Outcome::Terminal { .. } => "failed",
        other => other.label(),
    }
}

/// Writes the decision, fenced by the claim token. A write that fails (the
/// database blinked) is tried a few times before the row is left to the stale
/// reclaim: giving up at once would turn a one-second outage into a duplicate
/// delivery fifteen minutes later.
async fn record(inner: &Inner, row: &OutboxRow, token: &str, decision: Decision) -> RowResult {
    let (action, spec) = match decision {
        Decision::Finish(spec) => (RecordAction::Finish(spec.clone().into_finish()), Some(spec)),
        Decision::Retry { due_at, detail } => (RecordAction::Reschedule { due_at, detail }, None),
    };
    let item = Record { row: row.clone(), token: token.to_owned(), action };
    let mut wait = Duration::from_millis(200);
    for attempt in 1..=4 {
        let result = match inner.recorder.submit(item.clone()).await {
            Some(r) => r,
            None => Err(Arc::new(StoreError::WriterGone)),
        };
        match result {
            Ok(true) => return spec.as_ref().map_or(RowResult::Retried, |spec| finished(row, spec)),
            Ok(false) => {
                tracing::warn!(outbox = %row.id, "claim was taken back before the outcome was recorded; leaving it to the newer attempt");
                inner.metrics.delivery(&row.channel, "lost_claim");
                return RowResult::LostClaim;
            }
            Err(e) if attempt < 4 => {
                tracing::warn!(outbox = %row.id, error = %e, retry_in = ?wait, "could not record outcome; retrying");
                tokio::time::sleep(wait).await;
                wait *= 4;
            }
            Err(e) => {
                tracing::error!(outbox = %row.id, error = %e, "could not record outcome; the row will be reclaimed after the stale window");
                return RowResult::Unrecorded;
            }
        }
    }
    RowResult::Unrecorded
}

fn finished(row: &OutboxRow, spec: &FinishSpec) -> RowResult {
    tracing::debug!(outbox = %row.id, status = %spec.status, detail = ?spec.detail, "row finished");
    RowResult::Finished(spec.status)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}
