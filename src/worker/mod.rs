//! The worker: claim due rows, hand each to its channel, record the outcome.
//!
//! [`Worker::tick`] is one sweep and can be driven alone (tests call it until
//! the outbox is empty); [`Worker::run`] is the pipelined loop a service
//! runs.
//!
//! Kept from the seed: claiming is a compare-and-set, never a held lock or
//! `SKIP LOCKED`; a missing channel ends the row `failed` and says so; a
//! channel that errors or panics is a transient failure, not a crashed tick;
//! the batch is a bound, not a target; retry is flat. Added: one statement
//! claims a batch; every write after it is fenced by the claim's token; the
//! outcome and its send-log row commit together, and outcomes from
//! concurrent deliveries share transactions; a batch is composed with a
//! fixed number of queries; rows past their grace window expire; deliveries
//! run concurrently up to a per-channel limit; the next batch is claimed
//! while the current one delivers; an enqueue wakes the worker at once;
//! shutdown puts back what it did not finish.

pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::address::AddressKeys;
use crate::batch::Batcher;
use crate::channel::{Delivery, Lookup, Outcome, Registry};
use crate::clock::Clock;
use crate::compose::{Composer, Prepared};
use crate::domain::SendStatus;
use crate::metrics::Metrics;
use crate::store::{NewInboxMessage, OutboxRow, Record, RecordAction, Store, StoreError, new_id};
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
    pub cancelled: usize,
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
        self.sent + self.failed + self.suppressed + self.bounced + self.expired + self.cancelled
    }

    fn is_empty(&self) -> bool {
        *self == TickReport::default()
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

/// What became of one claimed row.
enum RowResult {
    Finished(SendStatus),
    Retried,
    LostClaim,
    Unrecorded,
}

/// A batch this instance claimed: the rows and the token that fences them.
struct Claimed {
    token: String,
    rows: Vec<OutboxRow>,
}

/// Row tasks in flight, with the claim each holds (to put it back if the
/// task is abandoned at shutdown).
struct InFlight {
    set: JoinSet<RowResult>,
    claims: HashMap<tokio::task::Id, (String, String)>,
}

impl InFlight {
    fn new() -> InFlight {
        InFlight { set: JoinSet::new(), claims: HashMap::new() }
    }

    fn spawn(&mut self, row_id: &str, token: &str, task: impl Future<Output = RowResult> + Send + 'static) {
        let handle = self.set.spawn(task);
        self.claims.insert(handle.id(), (row_id.to_owned(), token.to_owned()));
    }

    fn joined(
        &mut self,
        joined: Result<(tokio::task::Id, RowResult), tokio::task::JoinError>,
        report: &mut TickReport,
    ) {
        match joined {
            Ok((task, result)) => {
                self.claims.remove(&task);
                tally(report, result);
            }
            // A bug in our own code, not the channel's (those panics are
            // caught). The row is put back at shutdown or reclaimed.
            Err(e) => tracing::error!(error = %e, "row task failed"),
        }
    }
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
    composer: Composer,
    /// Outcomes from concurrent deliveries, group-committed (see `batch`).
    recorder: Batcher<Record, Result<bool, Arc<StoreError>>>,
    totals: Totals,
}

/// Most outcomes written in one transaction.
const RECORD_GROUP: usize = 1000;

impl Worker {
    pub fn new(
        store: Arc<dyn Store>,
        registry: Registry,
        clock: Arc<dyn Clock>,
        config: WorkerConfig,
        metrics: Metrics,
    ) -> Worker {
        Worker::with_address_keys(store, registry, clock, config, metrics, None)
    }

    /// [`Worker::new`], with the keys that hash email addresses, so outcomes
    /// decided before the email channel runs (an opted-out user) carry the
    /// address hash too.
    pub fn with_address_keys(
        store: Arc<dyn Store>,
        registry: Registry,
        clock: Arc<dyn Clock>,
        config: WorkerConfig,
        metrics: Metrics,
        keys: Option<AddressKeys>,
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
        let composer = Composer::new(store.clone(), keys);
        Worker {
            inner: Arc::new(Inner {
                store,
                registry,
                clock,
                config,
                metrics,
                limits,
                default_limit,
                composer,
                recorder,
                totals: Totals::default(),
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

    /// One sweep: take back stale claims, claim a batch, deliver it, record,
    /// and wait for all of it.
    ///
    /// If `shutdown` fires meanwhile, rows still waiting for a delivery slot
    /// are put back at once, in-flight deliveries get `shutdown_grace` to
    /// finish, and whatever is still running after that is abandoned and put
    /// back, so nothing this instance owns is left in `sending`.
    pub async fn tick_until(&self, shutdown: &CancellationToken) -> Result<TickReport, StoreError> {
        let mut report = TickReport { reclaimed: self.reclaim().await, ..TickReport::default() };
        if shutdown.is_cancelled() {
            return Ok(report);
        }
        let claimed = self.claim().await?;
        report.claimed = claimed.rows.len();
        let mut inflight = InFlight::new();
        report.released += self.dispatch(claimed, shutdown, &mut inflight).await;
        self.finish_inflight(&mut inflight, shutdown, &mut report).await;
        Ok(report)
    }

    /// Works until `shutdown` fires, claiming the next batch while the
    /// current one delivers (so a batch's slowest row never holds up the
    /// next), and sleeping, when nothing is due, until the earliest of: the
    /// next row falling due, an enqueue in this process (or, on PostgreSQL,
    /// in another instance), or `poll`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        tracing::info!(
            poll = ?inner.config.poll,
            batch = inner.config.batch,
            max_attempts = inner.config.max_attempts,
            "outbox worker started"
        );
        // At most one batch claimed ahead of the one being dispatched: the
        // local queue of graphile-worker, bounded so that a slow channel
        // does not leave hundreds of rows claimed and waiting.
        let (ahead, mut claimed) = mpsc::channel::<Claimed>(1);
        let claimer = tokio::spawn(Worker { inner: self.inner.clone() }.claim_loop(ahead, shutdown.clone()));
        let mut inflight = InFlight::new();
        let mut report = TickReport::default();
        let mut summary = tokio::time::interval(SUMMARY_EVERY);
        summary.tick().await;
        loop {
            tokio::select! {
                batch = claimed.recv() => match batch {
                    Some(batch) => report.released += self.dispatch(batch, &shutdown, &mut inflight).await,
                    None => break, // the claimer stopped: shutdown
                },
                Some(joined) = inflight.set.join_next_with_id(), if !inflight.set.is_empty() => {
                    inflight.joined(joined, &mut report);
                }
                _ = summary.tick() => log_summary(&mut report),
                _ = shutdown.cancelled() => break,
            }
        }
        // Batches claimed ahead and never dispatched: no delivery started,
        // so their attempts are refunded.
        claimed.close();
        while let Some(batch) = claimed.recv().await {
            report.released += self.release_unstarted(&batch.token, &batch.rows).await;
        }
        let _ = claimer.await;
        self.finish_inflight(&mut inflight, &shutdown, &mut report).await;
        log_summary(&mut report);
        tracing::info!("outbox worker stopped");
    }

    /// Claims batches and hands them to `ahead` until shutdown.
    async fn claim_loop(self, ahead: mpsc::Sender<Claimed>, shutdown: CancellationToken) {
        let inner = &self.inner;
        let wake = inner.store.enqueued_signal();
        let mut backoff = FIRST_BACKOFF;
        let mut last_reclaim: Option<Instant> = None;
        while !shutdown.is_cancelled() {
            // Stale claims are rare; looking for them every few seconds is
            // plenty, and keeps a statement off every batch.
            if last_reclaim.is_none_or(|t| t.elapsed() >= reclaim_every(inner.config.stale)) {
                self.reclaim().await;
                last_reclaim = Some(Instant::now());
            }
            let pause = match self.claim().await {
                Ok(batch) if batch.rows.is_empty() => self.pause_until_next_due(false).await,
                Ok(batch) => {
                    backoff = FIRST_BACKOFF;
                    let full = batch.rows.len() as u32 >= inner.config.batch;
                    let token = batch.token.clone();
                    if let Err(unsent) = ahead.send(batch).await {
                        // The dispatcher has stopped (shutdown) before taking
                        // this batch: give it back untouched.
                        self.release_unstarted(&token, &unsent.0.rows).await;
                        return;
                    }
                    if full {
                        continue; // a backlog: go straight on
                    }
                    self.pause_until_next_due(true).await
                }
                Err(e) => {
                    // The database is away: back off, doubling up to a cap,
                    // and try again; the pool reconnects by itself.
                    if e.is_contention() {
                        tracing::debug!(error = %e, "claim lost a race with another instance; trying again");
                    } else {
                        tracing::error!(error = %e, retry_in = ?backoff, "outbox claim failed");
                    }
                    let pause = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF.min(inner.config.poll));
                    pause
                }
            };
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = wake.notified() => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }

    /// Takes back claims older than the stale window; never fails the caller.
    async fn reclaim(&self) -> u64 {
        let inner = &self.inner;
        let now = inner.clock.now();
        match inner.store.reclaim_stale(now.minus(inner.config.stale), now).await {
            Ok(n) => {
                if n > 0 {
                    inner.metrics.reclaimed(n);
                    tracing::warn!(rows = n, "took back stale claims");
                }
                n
            }
            Err(e) if e.is_contention() => {
                tracing::warn!(error = %e, "stale-claim reclaim lost a race with another instance; the next sweep retries");
                0
            }
            Err(e) => {
                tracing::error!(error = %e, "failed to reclaim stale rows");
                0
            }
        }
    }

    async fn claim(&self) -> Result<Claimed, StoreError> {
        let inner = &self.inner;
        let token = new_id();
        let started = Instant::now();
        let now = inner.clock.now();
        let rows = inner.store.claim_due(now, inner.config.batch, &token).await?;
        inner.metrics.claim_duration(started.elapsed().as_secs_f64());
        inner.totals.claimed.fetch_add(rows.len() as u64, Ordering::Relaxed);
        for row in &rows {
            inner.metrics.claim_latency(now.since(row.due_at).as_secs_f64());
        }
        if !rows.is_empty() {
            tracing::debug!(rows = rows.len(), "claimed a batch");
        }
        Ok(Claimed { token, rows })
    }

    /// Composes a claimed batch and starts its deliveries, each when its
    /// channel has a free slot. Returns how many rows it put back because
    /// `shutdown` fired before their delivery could start.
    async fn dispatch(&self, batch: Claimed, shutdown: &CancellationToken, inflight: &mut InFlight) -> usize {
        let inner = &self.inner;
        if batch.rows.is_empty() {
            return 0;
        }
        let policy = self.policy();
        let now = inner.clock.now();
        // Expired rows and rows out of attempts need no composing.
        let mut due = Vec::with_capacity(batch.rows.len());
        for row in batch.rows {
            match policy::before_delivery(&row, now, policy) {
                Some(spec) => {
                    let inner = self.inner.clone();
                    let token = batch.token.clone();
                    inflight.spawn(&row.id.clone(), &batch.token, async move {
                        record(&inner, &row, &token, Decision::Finish(spec), None).await
                    });
                }
                None => due.push(row),
            }
        }
        let mut prepared = inner.composer.prepare(due).await.into_iter();
        while let Some(p) = prepared.next() {
            let token = batch.token.clone();
            let (delivery, channel) = match p {
                Prepared::Skip { row, outcome } => {
                    let inner = self.inner.clone();
                    inflight.spawn(&row.id.clone(), &token.clone(), async move {
                        decide_and_record(&inner, &row, &token, outcome).await
                    });
                    continue;
                }
                Prepared::Deliver(d) => match inner.registry.lookup(&d.row.channel) {
                    Lookup::Missing(detail) => {
                        let inner = self.inner.clone();
                        let row = d.row;
                        inflight.spawn(&row.id.clone(), &token.clone(), async move {
                            decide_and_record(&inner, &row, &token, Outcome::terminal(detail)).await
                        });
                        continue;
                    }
                    Lookup::Ready(channel) => (d, channel.clone()),
                },
            };
            let limit = inner.limits.get(&delivery.row.channel).unwrap_or(&inner.default_limit).clone();
            let permit = tokio::select! {
                permit = limit.acquire_owned() => permit.expect("delivery semaphores are never closed"),
                _ = shutdown.cancelled() => {
                    // Never started: put this row and the rest of the batch
                    // back without counting the attempt.
                    let mut rows = vec![delivery.row];
                    rows.extend(prepared.map(|p| p.row().clone()));
                    return self.release_unstarted(&batch.token, &rows).await;
                }
            };
            let inner = self.inner.clone();
            inflight.spawn(&delivery.row.id.clone(), &token.clone(), async move {
                deliver(inner, delivery, channel, token, permit).await
            });
        }
        0
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
                            tally(report, result);
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

    fn policy(&self) -> RetryPolicy {
        RetryPolicy { max_attempts: self.inner.config.max_attempts, retry: self.inner.config.retry }
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

/// How often the run loop logs what it did, when it did anything.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);
/// The first pause after a failed claim, doubled each time up to the cap.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How often the run loop looks for stale claims: a quarter of the window,
/// at most once a minute and at least once every five seconds.
fn reclaim_every(stale: Duration) -> Duration {
    (stale / 4).clamp(Duration::from_secs(5), Duration::from_secs(60))
}

/// One INFO line with what the worker did since the last one, as fields.
fn log_summary(report: &mut TickReport) {
    if report.is_empty() {
        return;
    }
    let r = std::mem::take(report);
    tracing::info!(
        sent = r.sent,
        failed = r.failed,
        suppressed = r.suppressed,
        bounced = r.bounced,
        expired = r.expired,
        cancelled = r.cancelled,
        retried = r.retried,
        lost_claim = r.lost_claim,
        released = r.released,
        unrecorded = r.unrecorded,
        "outbox worker progress"
    );
}

fn tally(report: &mut TickReport, result: RowResult) {
    use crate::domain::SendStatus as S;
    match result {
        RowResult::Finished(S::Sent) => report.sent += 1,
        RowResult::Finished(S::Suppressed) => report.suppressed += 1,
        RowResult::Finished(S::Bounced) => report.bounced += 1,
        RowResult::Finished(S::Expired) => report.expired += 1,
        RowResult::Finished(S::Cancelled) => report.cancelled += 1,
        RowResult::Finished(_) => report.failed += 1,
        RowResult::Retried => report.retried += 1,
        RowResult::LostClaim => report.lost_claim += 1,
        RowResult::Unrecorded => report.unrecorded += 1,
    }
}

/// Calls the channel for one row (holding its delivery slot only for the
/// call), then records what came of it.
async fn deliver(
    inner: Arc<Inner>,
    delivery: Box<Delivery>,
    channel: Arc<dyn crate::channel::Channel>,
    token: String,
    permit: OwnedSemaphorePermit,
) -> RowResult {
    let attempt = AssertUnwindSafe(channel.deliver(&delivery)).catch_unwind();
    let outcome = match tokio::time::timeout(inner.config.deliver_timeout, attempt).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(panic)) => {
            let msg = panic_message(&panic);
            tracing::error!(outbox = %delivery.row.id, channel = %delivery.row.channel, panic = %msg, "channel panicked");
            Outcome::retry(format!("channel \"{}\" panicked: {msg}", delivery.row.channel))
        }
        Err(_) => {
            Outcome::retry(format!("delivery did not finish within {}s", inner.config.deliver_timeout.as_secs_f64()))
        }
    };
    drop(permit);
    decide_and_record(&inner, &delivery.row, &token, outcome).await
}

async fn decide_and_record(inner: &Inner, row: &OutboxRow, token: &str, outcome: Outcome) -> RowResult {
    let policy = RetryPolicy { max_attempts: inner.config.max_attempts, retry: inner.config.retry };
    // An inbox delivery hands over its message to be written with the
    // outcome (see `Record::inbox`).
    let (outcome, inbox) = match outcome {
        Outcome::Inbox(message) => (Outcome::sent("inbox"), Some(*message)),
        other => (other, None),
    };
    inner.metrics.delivery(&row.channel, outcome_label(&outcome, row, policy));
    let decision = policy::decide(outcome, row, inner.clock.now(), policy);
    record(inner, row, token, decision, inbox).await
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
async fn record(
    inner: &Inner,
    row: &OutboxRow,
    token: &str,
    decision: Decision,
    inbox: Option<NewInboxMessage>,
) -> RowResult {
    let (action, spec) = match decision {
        Decision::Finish(spec) => (RecordAction::Finish(spec.clone().into_finish()), Some(spec)),
        Decision::Retry { due_at, detail } => {
            tracing::warn!(outbox = %row.id, channel = %row.channel, attempt = row.attempts, retry_at = %due_at, reason = %detail, "delivery failed; will retry");
            (RecordAction::Reschedule { due_at, detail }, None)
        }
    };
    let item = Record { row: row.clone(), token: token.to_owned(), action, inbox };
    let mut wait = Duration::from_millis(200);
    for attempt in 1..=4 {
        let result = match inner.recorder.submit(item.clone()).await {
            Some(r) => r,
            None => Err(Arc::new(StoreError::WriterGone)),
        };
        match result {
            Ok(true) => return spec.as_ref().map_or(RowResult::Retried, |spec| finished(inner, row, spec)),
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

fn finished(inner: &Inner, row: &OutboxRow, spec: &FinishSpec) -> RowResult {
    inner.totals.finished.fetch_add(1, Ordering::Relaxed);
    match spec.status {
        SendStatus::Sent => {
            inner.totals.sent.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(outbox = %row.id, channel = %row.channel, "sent");
        }
        SendStatus::Failed | SendStatus::Bounced => {
            let reason = spec.detail.as_deref().unwrap_or("");
            tracing::warn!(outbox = %row.id, channel = %row.channel, status = %spec.status, reason, "delivery failed");
        }
        _ => {
            let reason = spec.detail.as_deref().unwrap_or("");
            tracing::debug!(outbox = %row.id, channel = %row.channel, status = %spec.status, reason, "not delivered");
        }
    }
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
