//! One row, from its channel's answer to its recorded outcome; and the set
//! of row tasks in flight.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;

use super::policy::{self, RetryPolicy};
use super::{Inner, TickReport};
use crate::delivery::channel::{Channel, Delivery, Outcome};
use crate::domain::SendStatus;
use crate::store::{Finish, OutboxRow, Record, RecordAction, StoreError};

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
