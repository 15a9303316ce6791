//! One row, from its channel's answer to its recorded outcome: the channel
//! asked ([`ask`]), what it said decided ([`decide`]), the record submitted
//! ([`record`]) to the recorder, whose flush ([`record_group`]) writes a
//! group of outcomes in one transaction; and the set of row tasks in
//! flight.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;

use super::policy::{self, RetryPolicy};
use super::{Inner, TickReport};
use crate::batch::Batcher;
use crate::clock::Clock;
use crate::delivery::channel::{Channel, Delivery, Outcome};
use crate::domain::SendStatus;
use crate::store::{Finish, OutboxRow, Record, RecordAction, Store, StoreError};

/// What became of one row: the fate its record wrote, or why none was
/// written. Kept beside [`RecordAction`] because a lost claim and an
/// outcome the database never took are not fates of the row but of this
/// attempt at it; it exists to be tallied into [`TickReport`].
pub(super) enum RowResult {
    Finished(SendStatus),
    Retried,
    Held,
    LostClaim,
    Unrecorded,
}

pub(super) fn tally(report: &mut TickReport, result: RowResult) {
    use crate::domain::SendStatus as S;
    match result {
        RowResult::Finished(S::Sent) => report.sent += 1,
        RowResult::Finished(S::Suppressed) => report.suppressed += 1,
        RowResult::Finished(S::Bounced) => report.bounced += 1,
        RowResult::Finished(S::Expired) => report.expired += 1,
        RowResult::Finished(S::Cancelled) => report.cancelled += 1,
        RowResult::Finished(_) => report.failed += 1,
        RowResult::Retried => report.retried += 1,
        RowResult::Held => report.held += 1,
        RowResult::LostClaim => report.lost_claim += 1,
        RowResult::Unrecorded => report.unrecorded += 1,
    }
}

/// Row tasks in flight, with the claim each holds (to put it back if the
/// task is abandoned at shutdown).
pub(super) struct InFlight {
    pub set: JoinSet<RowResult>,
    pub claims: HashMap<tokio::task::Id, (String, String)>,
}

impl InFlight {
    pub fn new() -> InFlight {
        InFlight { set: JoinSet::new(), claims: HashMap::new() }
    }

    /// Starts a task for a claimed row (`token`), or for a row never claimed
    /// (`None`: nothing to put back if it is abandoned). `room` is the row's
    /// share of its lane's claims (see `lane::Lane::room`), given back when
    /// the task ends.
    pub fn spawn(
        &mut self,
        row_id: &str,
        token: Option<&str>,
        room: Option<OwnedSemaphorePermit>,
        task: impl Future<Output = RowResult> + Send + 'static,
    ) {
        let handle = self.set.spawn(async move {
            let _room = room;
            task.await
        });
        if let Some(token) = token {
            self.claims.insert(handle.id(), (row_id.to_owned(), token.to_owned()));
        }
    }

    pub fn joined(
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

/// Asks the channel, catching a panic and bounding the time; what it said,
/// as an outcome.
pub(super) async fn ask(inner: &Inner, channel: &dyn Channel, delivery: &Delivery) -> Outcome {
    let attempt = AssertUnwindSafe(channel.deliver(delivery)).catch_unwind();
    match tokio::time::timeout(inner.config.deliver_timeout, attempt).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(panic)) => {
            let msg = panic_message(&panic);
            tracing::error!(outbox = %delivery.row.id, channel = %delivery.row.channel, panic = %msg, "channel panicked");
            Outcome::retry(format!("channel \"{}\" panicked: {msg}", delivery.row.channel))
        }
        Err(_) => {
            Outcome::retry(format!("delivery did not finish within {}s", inner.config.deliver_timeout.as_secs_f64()))
        }
    }
}

/// Calls the channel for one claimed row (holding its delivery slot only for
/// the call), then records what came of it.
pub(super) async fn deliver(
    inner: Arc<Inner>,
    delivery: Box<Delivery>,
    channel: Arc<dyn Channel>,
    token: String,
    permit: OwnedSemaphorePermit,
) -> RowResult {
    let outcome = ask(&inner, channel.as_ref(), &delivery).await;
    drop(permit);
    decide_and_record(&inner, &delivery.row, Some(&token), outcome).await
}

/// Decides what an outcome means for the row and records it. `token` is the
/// claim the row is held under (`None`: a row never claimed, see
/// [`Record::token`]).
pub(super) async fn decide_and_record(
    inner: &Inner,
    row: &OutboxRow,
    token: Option<&str>,
    outcome: Outcome,
) -> RowResult {
    record(inner, decide(inner, row, token, outcome)).await
}

/// What an outcome means for the row, as the record to write (with the
/// inbox message an inbox delivery hands over: see [`Record::inbox`]).
pub(super) fn decide(inner: &Inner, row: &OutboxRow, token: Option<&str>, outcome: Outcome) -> Record {
    let policy = policy(inner);
    let (outcome, inbox) = match outcome {
        Outcome::Inbox(message) => (Outcome::sent("inbox"), Some(*message)),
        other => (other, None),
    };
    inner.metrics.delivery(&row.channel, outcome_label(&outcome, row, policy));
    let action = policy::decide(outcome, row, inner.clock.now(), policy);
    Record { row: row.clone(), token: token.map(str::to_owned), action, inbox }
}

/// The record of an outcome decided before the channel was asked (see
/// [`policy::before_delivery`]).
pub(super) fn finish(row: OutboxRow, token: Option<&str>, finish: Finish) -> Record {
    Record { row, token: token.map(str::to_owned), action: RecordAction::Finish(finish), inbox: None }
}

pub(super) fn policy(inner: &Inner) -> RetryPolicy {
    RetryPolicy { max_attempts: inner.config.max_attempts, retry: inner.config.retry }
}

fn outcome_label(outcome: &Outcome, row: &OutboxRow, policy: RetryPolicy) -> &'static str {
    match outcome {
        Outcome::Retry { .. } if row.attempts >= i64::from(policy.max_attempts) => "failed",
        Outcome::Terminal { .. } => "failed",
        other => other.label(),
    }
}

/// Writes the record, fenced by the claim.
///
/// While the database is away (a failover, a lost node, a cut connection)
/// the outcome is kept here and written when it answers again: from 250 ms,
/// doubling up to 2 s, for as long as the row can still be this instance's
/// (`worker.stale`; with a lease, the fence says sooner whether it still
/// is). Giving up would turn a ten-second failover into a second delivery
/// of a message that was delivered: an email the relay accepted just before
/// the primary died is recorded, not sent again. A write the database
/// refuses for what it is (not for being away) is tried a few times only.
/// (A row never claimed is just due again if its outcome is lost.)
pub(super) async fn record(inner: &Inner, item: Record) -> RowResult {
    let row = &item.row;
    let token = item.token.as_deref();
    if let RecordAction::Hold { due_at, reason, detail, .. } = &item.action {
        tracing::debug!(outbox = %row.id, channel = %row.channel, until = %due_at, %reason, detail, "held");
    }
    let started = tokio::time::Instant::now();
    let mut pauses = crate::store::race::AwayPauses::new();
    let mut failures = 0u32;
    loop {
        let result = match inner.recorder.submit(item.clone()).await {
            Some(r) => r,
            None => Err(Arc::new(StoreError::WriterGone)),
        };
        match result {
            Ok(true) => {
                if failures > 0 {
                    inner.metrics.outcome_kept("recorded");
                    tracing::info!(outbox = %row.id, failures, waited = ?started.elapsed(), "recorded an outcome kept while the database was away");
                }
                return match &item.action {
                    RecordAction::Finish(f) => finished(inner, row, f),
                    RecordAction::Hold { .. } => RowResult::Held,
                    RecordAction::Reschedule { .. } => RowResult::Retried,
                };
            }
            Ok(false) => {
                if token.is_some() {
                    tracing::warn!(outbox = %row.id, "claim was taken back before the outcome was recorded; leaving it to the newer attempt");
                } else {
                    tracing::debug!(outbox = %row.id, "another instance delivered this row first");
                }
                if failures > 0 {
                    inner.metrics.outcome_kept("refused");
                }
                inner.metrics.delivery(&row.channel, "lost_claim");
                return RowResult::LostClaim;
            }
            Err(e) => {
                failures += 1;
                let away = e.is_unavailable() || e.is_lost_race();
                let keep = if away { started.elapsed() < inner.config.stale } else { failures < 4 };
                if !keep {
                    if failures > 1 {
                        inner.metrics.outcome_kept("given_up");
                    }
                    tracing::error!(outbox = %row.id, error = %e, failures, "could not record outcome; the row will be taken back and delivered again");
                    return RowResult::Unrecorded;
                }
                // While the database is away the flush that failed logged
                // one WARN for all its rows (`record_group`); one per row
                // would be thousands of lines for one outage. A row the
                // database refuses for what it is says so itself.
                let wait = pauses.next_pause();
                if !away && failures == 1 {
                    tracing::warn!(outbox = %row.id, error = %e, retry_in = ?wait, "could not record outcome; trying again");
                } else {
                    tracing::debug!(outbox = %row.id, error = %e, failures, retry_in = ?wait, "could not record outcome; keeping it and retrying until the database answers");
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The recorder: outcomes from concurrent deliveries, written in groups
/// (see `batch`).
pub(super) type Recorder = Batcher<Record, Result<bool, Arc<StoreError>>>;

/// Most outcomes written in one transaction.
const RECORD_GROUP: usize = 1000;

/// Outcome flushes in flight at once on PostgreSQL and MySQL. With one,
/// a drain alternated: the server wrote a batch while Herald waited, then
/// Herald composed the next while the server waited (a third of two cores
/// idle). With two, the next batch's flush runs beside the current one's,
/// as two instances' flushes always could: their rows are disjoint (a row
/// is in one batch at a time), and the event positions are taken last,
/// under the sequence row's lock, so events still commit in position order.
/// PostgreSQL drain, `herald bench --rows 50000`, alternating: 10,465-12,642
/// rows/s with one, 14,863-17,837 with two; MariaDB 8,791-9,786 against
/// 11,687-12,797. SQLite keeps one: its writes take turns on one connection.
/// A third was measured with two batches recorded per lane and gave nothing
/// (medians with two and three: PostgreSQL 14,800 and 15,600, MariaDB 11,100
/// and 10,700, within the noise), so there are two.
const RECORD_FLUSHERS: usize = 2;

/// Starts the recorder over `store`: up to [`RECORD_GROUP`] outcomes a
/// flush, [`RECORD_FLUSHERS`] flushes at once where the dialect allows.
pub(super) fn recorder(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Recorder {
    let away = Arc::new(AwayLog::default());
    let flushers = store.dialect().concurrent_flushes(RECORD_FLUSHERS);
    Batcher::spawn_parallel(RECORD_GROUP, flushers, move |items: Vec<Record>| {
        let (store, clock, away) = (store.clone(), clock.clone(), away.clone());
        async move { record_group(store.as_ref(), &items, clock.now(), &away).await }
    })
}

/// The WARN for outcomes kept while the database is away: one line for a
/// failed flush with its count of rows, and then at most one every
/// [`AWAY_LOG_EVERY`] with the flushes and rows that failed since (each
/// kept row is retried from 250 ms to 2 s, and every retry is a flush: one
/// line each would still be dozens a minute). DEBUG in between.
#[derive(Default)]
struct AwayLog {
    /// When the last WARN went out, and the flushes and rows failed since.
    state: Mutex<(Option<tokio::time::Instant>, u64, u64)>,
}

const AWAY_LOG_EVERY: Duration = Duration::from_secs(10);

impl AwayLog {
    /// Counts a failed flush of `rows`; `Some((flushes, rows))` to report
    /// now (this one included), `None` to stay at DEBUG.
    fn failed(&self, rows: usize) -> Option<(u64, u64)> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.1 += 1;
        s.2 += rows as u64;
        let now = tokio::time::Instant::now();
        if s.0.is_some_and(|t| now.duration_since(t) < AWAY_LOG_EVERY) {
            return None;
        }
        let report = (s.1, s.2);
        *s = (Some(now), 0, 0);
        Some(report)
    }
}

/// Writes a group of outcomes in one transaction. If the database refuses
/// the group for something in one of its rows (not a lost race), the rows
/// are written one by one, so that row fails alone instead of holding back
/// every outcome flushed with it.
async fn record_group(
    store: &dyn Store,
    items: &[Record],
    now: crate::clock::Millis,
    away: &AwayLog,
) -> Vec<Result<bool, Arc<StoreError>>> {
    match crate::store::race::retry_lost_race("record outcomes", || store.record_outcomes(items, now)).await {
        Ok(won) => won.into_iter().map(Ok).collect(),
        Err(e) if crate::batch::worth_splitting(&e, items.len()) => {
            tracing::warn!(error = %e, rows = items.len(), "recording a group of outcomes failed; recording them one by one");
            let each = crate::batch::one_by_one(items, |one| store.record_outcomes(one, now)).await;
            each.into_iter().map(|r| r.map_err(Arc::new)).collect()
        }
        Err(e) => {
            // One line for the flush, however many rows it held: each row
            // keeps its outcome and says so only at DEBUG (`record`),
            // so a database away for a minute is a few lines, not one per row.
            let channels: std::collections::BTreeSet<&str> = items.iter().map(|i| i.row.channel.as_str()).collect();
            let channels = channels.into_iter().collect::<Vec<_>>().join(",");
            if e.is_unavailable() || e.is_lost_race() {
                match away.failed(items.len()) {
                    Some((flushes, rows_since)) => tracing::warn!(
                        rows = items.len(),
                        channels,
                        error = %e,
                        flushes_failed_since_last_warning = flushes,
                        rows_in_them = rows_since,
                        "could not record a group of outcomes; keeping them until the database answers"
                    ),
                    None => {
                        tracing::debug!(rows = items.len(), channels, error = %e, "could not record a group of outcomes; keeping them")
                    }
                }
            } else {
                tracing::warn!(rows = items.len(), channels, error = %e, "could not record a group of outcomes; trying again");
            }
            let e = Arc::new(e);
            items.iter().map(|_| Err(e.clone())).collect()
        }
    }
}

pub(super) fn finished(inner: &Inner, row: &OutboxRow, finish: &Finish) -> RowResult {
    inner.totals.finished.fetch_add(1, Ordering::Relaxed);
    match finish.status {
        SendStatus::Sent => {
            inner.totals.sent.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(outbox = %row.id, channel = %row.channel, "sent");
        }
        SendStatus::Failed | SendStatus::Bounced => {
            let reason = finish.detail.as_deref().unwrap_or("");
            tracing::warn!(outbox = %row.id, channel = %row.channel, status = %finish.status, reason, "delivery failed");
        }
        _ => {
            let reason = finish.detail.as_deref().unwrap_or("");
            tracing::debug!(outbox = %row.id, channel = %row.channel, status = %finish.status, reason, "not delivered");
        }
    }
    RowResult::Finished(finish.status)
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

#[cfg(test)]
mod tests;
