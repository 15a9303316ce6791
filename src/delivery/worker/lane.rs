//! Lanes: each channel's rows are a queue of their own.
//!
//! One queue for every channel would put a backlog of mail for a slow relay
//! in front of the in-app inbox's rows; so each channel has a lane that
//! claims only its own rows (through an index per channel) and delivers
//! them under its own concurrency limit.
//!
//! A lane is one of two kinds. A channel that talks to the outside world
//! (email, webhooks) has a *claimed* lane: rows are claimed (`sending`,
//! under a token), delivered outside any transaction, and recorded fenced
//! by the claim. A channel whose delivery is itself a
//! write in Herald's database (the inbox) has a *direct* lane: rows are
//! read without claiming them, rendered, and then claimed, delivered and
//! recorded in one transaction by one compare-and-set on the row being
//! still `scheduled` and unchanged. Nothing is ever in flight outside a
//! transaction for such a row, so it cannot be left `sending` or delivered
//! twice, and it costs one write of the outbox row instead of two.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::record::{InFlight, RowResult, ask, decide, decide_and_record, deliver, finish, policy, record, tally};
use super::{TickReport, Worker};
use crate::store::race::{AWAY_FIRST_PAUSE, AWAY_MAX_PAUSE, AwayPauses};

use crate::clock::Millis;
use crate::delivery::channel::{Channel, Lookup, Outcome};
use crate::delivery::compose::Prepared;
use crate::store::{OutboxRow, StoreError, new_id};

/// How long a composed row may wait for a delivery slot before it is
/// composed again (see `dispatch`).
const RECOMPOSE_AFTER: Duration = Duration::from_secs(1);

/// A direct lane's batches being recorded while it reads the next. With
/// one, a drain still alternated between reading and writing whenever a
/// flush took longer than the next read; with two, the outcome flushes
/// (`record::RECORD_FLUSHERS`) always have a batch to write while the lane
/// composes the next. Their rows are left out of the read, as with one.
const RECORDINGS_IN_FLIGHT: usize = 2;

/// The largest batch a direct lane grows to while a backlog lasts (see
/// `run_direct_lane`): ten times `worker.batch`, at most 1,000 rows (one
/// flush's worth, `record::RECORD_GROUP`), and never less than
/// `worker.batch`.
fn direct_batch_ceiling(batch: u32) -> u32 {
    batch.saturating_mul(10).min(1000).max(batch.max(1))
}

/// Rows a claimed lane may hold claimed and not yet finished, per delivery
/// slot of its channel (see [`Lane::room`]).
///
/// A claimed row is `sending` under this instance until its outcome is
/// recorded, and if the instance dies, nobody else may take it before the
/// lease rescue, 80-85 s after the last renewal (`store::instances`). A
/// lane used to claim `worker.batch` rows at a time and keep claiming
/// ahead: with email at 8 slots and 2 s a message, a batch of 100 waited up
/// to 25 s for its slots, and an instance SIGKILLed 3 s into a drain held
/// 100 to 200 claims that nobody could send for a minute and a half, then
/// one instance sent them all at 4 a second (59 emails were still
/// `sending` 120 s after the kill). With room for two rows per slot the
/// rows that cannot start at once stay `scheduled`, where the other
/// instances take them now; the second slot's worth keeps the slots busy
/// while the next claim runs, and lets a claim take at least a slot's
/// worth of rows, not one statement per freed slot. Rejected: claiming
/// only for the free slots (a claim per finished delivery), and rescuing
/// a dead instance's never-started rows sooner (it would need a write per
/// row when its delivery starts).
const CLAIMED_PER_SLOT: usize = 2;

/// One channel's queue.
pub(super) struct Lane {
    pub channel: String,
    pub handler: Arc<dyn Channel>,
    /// Delivered by a write in Herald's own database: see the module docs.
    pub direct: bool,
    /// Woken when rows are enqueued.
    pub wake: Notify,
    /// The channel's delivery slots on this instance.
    slots: usize,
    /// A claimed lane's claims not yet finished, [`CLAIMED_PER_SLOT`] per
    /// slot: a claim takes room first, and each row gives its share back
    /// when its outcome is recorded (or it is put back).
    room: Arc<Semaphore>,
}

impl Lane {
    pub fn new(channel: &str, handler: Arc<dyn Channel>, slots: usize) -> Lane {
        Lane {
            channel: channel.to_owned(),
            direct: handler.delivers_in_database(),
            handler,
            wake: Notify::new(),
            slots,
            room: Arc::new(Semaphore::new(slots.saturating_mul(CLAIMED_PER_SLOT))),
        }
    }
}

/// A batch this instance claimed: the rows and the token that fences them.
pub(super) struct Claimed {
    pub token: String,
    pub rows: Vec<OutboxRow>,
    /// The rows' room in their lane, one permit a row (claimed by a lane's
    /// claimer; `None` for a sweep's batch, which `tick` waits out anyway).
    pub room: Option<OwnedSemaphorePermit>,
}

impl Claimed {
    /// Nothing claimed.
    pub fn none() -> Claimed {
        Claimed { token: String::new(), rows: Vec::new(), room: None }
    }
}

/// A direct batch whose outcomes are being recorded.
pub(super) struct Recording {
    /// The rows' ids and due times: read again while they are being
    /// recorded, they would be delivered twice over (and lose the
    /// compare-and-set).
    pub rows: Vec<(String, Millis)>,
    pub results: JoinHandle<Vec<RowResult>>,
}

/// Where a direct lane's next read starts while a backlog lasts.
///
/// A read must leave out the rows of the batches still being recorded, and
/// without a lower bound it walks past all of them in the index first, each
/// fetched and tested against the exclusion list: on MariaDB 13 of the 40 ms
/// a read of 1,000 rows took with two batches in flight. After a full batch
/// the next read starts at that batch's latest due time instead, so it
/// walks past only the rows due in that same millisecond.
///
/// The cost: a row that falls due behind the backlog's position while it
/// drains (a row put back after a failed flush, one enqueued by a host with
/// an explicit `due_at` in the past) waits until the lane starts over from
/// the oldest due row, which it does after any batch that is not full and
/// at least every [`CURSOR_HOLD`] (by the worker's clock). The alternative,
/// always starting at the oldest due row, reads every such row at once but
/// makes every read of a deep backlog pay for the rows in flight.
#[derive(Default)]
struct BacklogCursor {
    from: Option<Position>,
}

#[derive(Clone, Copy)]
struct Position {
    /// The latest `due_at` of the last full batch: the next read's bound.
    due: Millis,
    /// When this run of full batches began (the worker's clock).
    since: Millis,
}

/// The ids a read from `from_due` must leave out: the rows still being
/// recorded that are due at or after it (a row due before it cannot be
/// read again). With the cursor in a backlog that is a handful of rows
/// instead of the whole of two batches: a long exclusion list costs every
/// read (on MariaDB 2,000 ids took a read of 1,000 rows from 14 to 22 ms
/// even when none of them was in its range).
fn in_flight_from(recording: &VecDeque<Recording>, from_due: Option<Millis>) -> Vec<&str> {
    let from = from_due.unwrap_or(Millis(i64::MIN));
    recording.iter().flat_map(|r| r.rows.iter().filter(|(_, due)| *due >= from).map(|(id, _)| id.as_str())).collect()
}

/// The longest a direct lane reads from its backlog position before it
/// starts over from the oldest due row (see [`BacklogCursor`]).
const CURSOR_HOLD: Duration = Duration::from_secs(1);

impl BacklogCursor {
    /// The lower bound for the next read, or `None` to start over.
    fn bound(&mut self, now: Millis) -> Option<Millis> {
        match self.from {
            Some(p) if now.since(p.since) < CURSOR_HOLD => Some(p.due),
            _ => {
                self.from = None;
                None
            }
        }
    }

    /// After a read: a full batch moves the position to its latest due
    /// time (keeping when the run of full batches began); anything else
    /// starts over.
    fn after(&mut self, full: bool, last_due: Option<Millis>, now: Millis) {
        self.from = match (full, last_due) {
            (true, Some(due)) => Some(Position { due, since: self.from.map_or(now, |p| p.since) }),
            _ => None,
        };
    }
}

impl Recording {
    /// The latest `due_at` among the rows: where the next read of a backlog
    /// starts (see [`BacklogCursor`]).
    fn last_due(&self) -> Option<Millis> {
        self.rows.iter().map(|(_, due)| *due).max()
    }

    pub async fn finish(self, report: &mut TickReport) {
        match self.results.await {
            Ok(results) => results.into_iter().for_each(|r| tally(report, r)),
            Err(e) => tracing::error!(error = %e, "recording a batch failed"),
        }
    }
}

impl Worker {
    /// Claims up to `limit` of one claimed lane's rows.
    pub(super) async fn claim_lane(&self, lane: &Lane, limit: u32) -> Result<Claimed, StoreError> {
        let inner = &self.inner;
        let token = new_id();
        let started = Instant::now();
        let now = inner.clock.now();
        let rows = inner.store.claim_channel(&lane.channel, now, limit, &token).await?;
        self.note_taken(&rows, started, now);
        Ok(Claimed { token, rows, room: None })
    }

    /// Waits until `lane` has room for a claim worth making (a slot's worth
    /// of rows, or `worker.batch` if that is less) and takes it, with as
    /// much more as is free, up to `worker.batch`. `None` on shutdown.
    async fn claim_room(&self, lane: &Lane, shutdown: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        let batch = self.inner.config.batch.max(1) as usize;
        let least = lane.slots.clamp(1, batch);
        let mut room = tokio::select! {
            room = lane.room.clone().acquire_many_owned(least as u32) => room.expect("lane room is never closed"),
            _ = shutdown.cancelled() => return None,
        };
        let more = lane.room.available_permits().min(batch - least);
        if more > 0
            && let Ok(extra) = lane.room.clone().try_acquire_many_owned(more as u32)
        {
            room.merge(extra);
        }
        Some(room)
    }

    pub(super) fn note_taken(&self, rows: &[OutboxRow], started: Instant, now: crate::clock::Millis) {
        let inner = &self.inner;
        inner.metrics.claim_duration(started.elapsed().as_secs_f64());
        inner.totals.claimed.fetch_add(rows.len() as u64, Ordering::Relaxed);
        for row in rows {
            inner.metrics.claim_latency(now.since(row.due_at).as_secs_f64());
        }
        if !rows.is_empty() {
            tracing::debug!(rows = rows.len(), "took a batch");
        }
    }

    /// Composes a claimed batch and starts its deliveries, each when its
    /// channel has a free slot. Returns how many rows it put back because
    /// `shutdown` fired before their delivery could start.
    pub(super) async fn dispatch(
        &self,
        batch: Claimed,
        shutdown: &CancellationToken,
        inflight: &mut InFlight,
    ) -> usize {
        let inner = &self.inner;
        if batch.rows.is_empty() {
            return 0;
        }
        let token = batch.token;
        let mut room = batch.room;
        let mut share = move || room.as_mut().and_then(|r| r.split(1));
        let now = inner.clock.now();
        // Expired rows and rows out of attempts need no composing.
        let mut due = Vec::with_capacity(batch.rows.len());
        for row in batch.rows {
            match super::policy::before_delivery(&row, now, policy(inner)) {
                Some(done) => {
                    let (inner, item) = (self.inner.clone(), finish(row, Some(&token), done));
                    inflight.spawn(&item.row.id.clone(), Some(&token.clone()), share(), async move {
                        record(&inner, item).await
                    });
                }
                None => due.push(row),
            }
        }
        let prepared = inner.composer.prepare(due, now).await;
        prefetch(inner, &prepared).await;
        let mut prepared = prepared.into_iter();
        let mut composed_at = inner.clock.now();
        while let Some(mut p) = prepared.next() {
            // A slot on the row's channel first, when it is to be delivered.
            let mut permit = None;
            if let Prepared::Deliver(d) = &p
                && let Lookup::Ready(_) = inner.registry.lookup(&d.row.channel)
            {
                let limit = inner.limits.get(&d.row.channel).unwrap_or(&inner.default_limit).clone();
                permit = Some(tokio::select! {
                    permit = limit.acquire_owned() => permit.expect("delivery semaphores are never closed"),
                    _ = shutdown.cancelled() => {
                        // Never started: put this row and the rest of the
                        // batch back without counting the attempt.
                        return self.release_unstarted(&token, &this_and_rest(&p, prepared)).await;
                    }
                });
                if !self.may_start() {
                    // The lease lapsed while this batch waited for a slot:
                    // start nothing more, and put the rest back (if the
                    // database is away, another instance rescues them once
                    // the lease has been lapsed for deliver_timeout).
                    tracing::warn!(channel = %d.row.channel, "lease not held; putting back the rest of the batch undelivered");
                    return self.release_unstarted(&token, &this_and_rest(&p, prepared)).await;
                }
                // A row that waited for its slot RECOMPOSE_AFTER or longer
                // (a saturated channel: email 4 at a time works through a
                // batch of 100 for many seconds) is composed again, with
                // the rest of the batch, before it goes: a rule disabled or
                // edited while it waited still cancels or re-renders it.
                // At most once a second per batch; before every row it
                // would cost four queries a row.
                if d.rule.is_some() && inner.clock.now().since(composed_at) >= RECOMPOSE_AFTER {
                    let rows = this_and_rest(&p, prepared);
                    prepared = inner.composer.prepare(rows, inner.clock.now()).await.into_iter();
                    composed_at = inner.clock.now();
                    p = prepared.next().expect("the row just composed again");
                }
            }
            match p {
                Prepared::Skip { row, outcome } => {
                    let (inner, token) = (self.inner.clone(), token.clone());
                    inflight.spawn(&row.id.clone(), Some(&token.clone()), share(), async move {
                        decide_and_record(&inner, &row, Some(&token), outcome).await
                    });
                }
                Prepared::Deliver(delivery) => match (inner.registry.lookup(&delivery.row.channel), permit) {
                    (Lookup::Ready(channel), Some(permit)) => {
                        let (inner, token, channel) = (self.inner.clone(), token.clone(), channel.clone());
                        inflight.spawn(&delivery.row.id.clone(), Some(&token.clone()), share(), async move {
                            deliver(inner, delivery, channel, token, permit).await
                        });
                    }
                    (Lookup::Ready(_), None) => unreachable!("a slot is taken for every ready channel"),
                    (Lookup::Missing(detail), _) => {
                        let (inner, token, row) = (self.inner.clone(), token.clone(), delivery.row);
                        inflight.spawn(&row.id.clone(), Some(&token.clone()), share(), async move {
                            decide_and_record(&inner, &row, Some(&token), Outcome::terminal(detail)).await
                        });
                    }
                },
            }
        }
        0
    }

    /// Reads, composes and delivers a batch of a direct lane's rows (leaving
    /// out `exclude`, rows still being recorded, and rows due before
    /// `from_due`), and starts recording them; `None` when none is due.
    pub(super) async fn direct_batch(
        &self,
        lane: &Lane,
        limit: u32,
        exclude: &[&str],
        from_due: Option<Millis>,
    ) -> Result<Option<Recording>, StoreError> {
        let inner = &self.inner;
        let started = Instant::now();
        let now = inner.clock.now();
        let mut rows = inner.store.peek_channel(&lane.channel, now, limit, exclude, from_due).await?;
        if rows.is_empty() {
            return Ok(None);
        }
        self.note_taken(&rows, started, now);
        // The attempt this is: counted when it is recorded (see `Record::token`).
        rows.iter_mut().for_each(|r| r.attempts += 1);
        let in_flight: Vec<(String, Millis)> = rows.iter().map(|r| (r.id.clone(), r.due_at)).collect();
        let mut decided = Vec::with_capacity(rows.len());
        let mut due = Vec::with_capacity(rows.len());
        for row in rows {
            match super::policy::before_delivery(&row, now, policy(inner)) {
                Some(done) => decided.push(finish(row, None, done)),
                None => due.push(row),
            }
        }
        for p in inner.composer.prepare(due, now).await {
            match p {
                Prepared::Skip { row, outcome } => {
                    decided.push(decide(inner, &row, None, outcome));
                }
                // The channel only builds the message: no slot to wait for,
                // no task to start.
                Prepared::Deliver(d) => {
                    let outcome = ask(inner, lane.handler.as_ref(), &d).await;
                    decided.push(decide(inner, &d.row, None, outcome));
                }
            }
        }
        let worker = self.inner.clone();
        let results = tokio::spawn(async move {
            let records = decided.into_iter().map(|item| record(&worker, item));
            futures::future::join_all(records).await
        });
        Ok(Some(Recording { rows: in_flight, results }))
    }

    /// A claimed lane until `shutdown`: claims the next batch while the
    /// current one delivers (so a batch's slowest row never holds up the
    /// next), never more rows than the lane has room for
    /// ([`CLAIMED_PER_SLOT`] per delivery slot).
    pub(super) async fn run_claimed_lane(&self, lane: Arc<Lane>, shutdown: CancellationToken) {
        let (ahead, mut claimed) = mpsc::channel::<Claimed>(1);
        let claimer = {
            let (worker, lane, shutdown) = (self.clone(), lane.clone(), shutdown.clone());
            tokio::spawn(async move { worker.lane_claimer(&lane, ahead, shutdown).await })
        };
        let mut inflight = InFlight::new();
        loop {
            tokio::select! {
                batch = claimed.recv() => match batch {
                    Some(batch) => {
                        let released = self.dispatch(batch, &shutdown, &mut inflight).await;
                        self.progress(|r| r.released += released);
                    }
                    None => break, // the claimer stopped: shutdown
                },
                Some(joined) = inflight.set.join_next_with_id(), if !inflight.set.is_empty() => {
                    self.progress(|r| inflight.joined(joined, r));
                }
                _ = shutdown.cancelled() => break,
            }
        }
        // Batches claimed ahead and never dispatched: no delivery started,
        // so their attempts are refunded.
        claimed.close();
        while let Some(batch) = claimed.recv().await {
            let released = self.release_unstarted(&batch.token, &batch.rows).await;
            self.progress(|r| r.released += released);
        }
        let _ = claimer.await;
        let mut report = TickReport::default();
        self.finish_inflight(&mut inflight, &shutdown, &mut report).await;
        self.progress(|r| r.add(&report));
    }

    /// Claims a claimed lane's batches, each as large as the lane has room
    /// for (see [`CLAIMED_PER_SLOT`]), and hands them to `ahead`.
    async fn lane_claimer(&self, lane: &Lane, ahead: mpsc::Sender<Claimed>, shutdown: CancellationToken) {
        let mut away = self.away_pauses();
        while !shutdown.is_cancelled() {
            let Some(mut room) = self.claim_room(lane, &shutdown).await else { break };
            // Checked after the wait for room, which can be long.
            if !self.may_start() {
                // No lease: no new delivery (see `lease`).
                drop(room);
                self.wait(lane, AWAY_FIRST_PAUSE, &shutdown).await;
                continue;
            }
            let wanted = room.num_permits();
            let pause = match self.claim_lane(lane, wanted as u32).await {
                Ok(batch) if batch.rows.is_empty() => {
                    drop(room);
                    self.pause_lane(lane, false).await
                }
                Ok(mut batch) => {
                    away.reset();
                    let full = batch.rows.len() >= wanted;
                    drop(room.split(wanted - batch.rows.len()));
                    batch.room = Some(room);
                    let token = batch.token.clone();
                    if let Err(unsent) = ahead.send(batch).await {
                        // The dispatcher stopped (shutdown) before taking it.
                        self.release_unstarted(&token, &unsent.0.rows).await;
                        return;
                    }
                    if full {
                        continue; // a backlog: go straight on
                    }
                    self.pause_lane(lane, true).await
                }
                Err(e) => self.failed_sweep(lane, &e, &mut away),
            };
            self.wait(lane, pause, &shutdown).await;
        }
    }

    /// A direct lane until `shutdown`: reads the next batch while earlier
    /// ones are recorded (leaving their rows out), at most
    /// [`RECORDINGS_IN_FLIGHT`] of them.
    ///
    /// The batch grows while there is a backlog: after a full batch the next
    /// is twice the size, up to [`direct_batch_ceiling`]; a batch that is
    /// not full sets it back to `worker.batch`. Every batch costs the same
    /// dozen statements whatever its size (read, compose, one flush), so a
    /// deep backlog drains in fewer, larger transactions (on PostgreSQL,
    /// 100 rows a batch drained 8,600-9,200 rows/s and 1,000 drained
    /// 12,400-13,500), while a trickle still goes out in small batches that
    /// wait for nothing. A fixed large batch would do the same for the
    /// backlog, but every caller of a trickle would wait for a large read;
    /// a per-row lane would never amortise the statements at all.
    pub(super) async fn run_direct_lane(&self, lane: Arc<Lane>, shutdown: CancellationToken) {
        let mut recording: VecDeque<Recording> = VecDeque::new();
        let mut away = self.away_pauses();
        let (base, ceiling) = (self.inner.config.batch.max(1), direct_batch_ceiling(self.inner.config.batch));
        let mut size = base;
        let mut cursor = BacklogCursor::default();
        while !shutdown.is_cancelled() {
            if !self.may_start() {
                self.wait(&lane, AWAY_FIRST_PAUSE, &shutdown).await;
                continue;
            }
            let from_due = cursor.bound(self.inner.clock.now());
            let exclude = in_flight_from(&recording, from_due);
            let read = self.direct_batch(&lane, size, &exclude, from_due).await;
            let full = matches!(&read, Ok(Some(batch)) if batch.rows.len() as u32 >= size);
            size = if full { size.saturating_mul(2).min(ceiling) } else { base };
            let last_due = read.as_ref().ok().and_then(|b| b.as_ref().and_then(Recording::last_due));
            cursor.after(full, last_due, self.inner.clock.now());
            let pause = match read {
                Ok(Some(batch)) => {
                    away.reset();
                    recording.push_back(batch);
                    if recording.len() > RECORDINGS_IN_FLIGHT
                        && let Some(previous) = recording.pop_front()
                    {
                        self.finish_recording(previous).await;
                    }
                    if full {
                        continue;
                    }
                    self.pause_lane(&lane, true).await
                }
                Ok(None) => match recording.pop_front() {
                    // Everything due is being recorded: wait for it, then look again.
                    Some(previous) => {
                        self.finish_recording(previous).await;
                        continue;
                    }
                    None => self.pause_lane(&lane, false).await,
                },
                Err(e) => self.failed_sweep(&lane, &e, &mut away),
            };
            self.wait(&lane, pause, &shutdown).await;
        }
        while let Some(previous) = recording.pop_front() {
            self.finish_recording(previous).await;
        }
    }

    async fn finish_recording(&self, recording: Recording) {
        let mut report = TickReport::default();
        recording.finish(&mut report).await;
        self.progress(|r| r.add(&report));
    }

    /// A failed claim or read. A lost race (another instance's claim won
    /// the same rows; a Galera certification failure) is routine: counted,
    /// and tried again after a few milliseconds with jitter. Otherwise the
    /// database is away: back off from 250 ms, doubling up to 2 s, and try
    /// again; the pool reconnects by itself.
    fn failed_sweep(&self, lane: &Lane, e: &StoreError, away: &mut AwayPauses) -> Duration {
        if e.is_lost_race() {
            crate::store::race::count("claim");
            tracing::debug!(error = %e, channel = %lane.channel, "claim lost a race with another instance; trying again");
            return Duration::from_millis(rand::random_range(1..=20));
        }
        let pause = away.next_pause();
        if e.is_unavailable() {
            tracing::warn!(error = %e, retry_in = ?pause, channel = %lane.channel, "outbox sweep failed");
        } else {
            tracing::error!(error = %e, retry_in = ?pause, channel = %lane.channel, "outbox sweep failed");
        }
        pause
    }

    /// A sweep's pauses while the database is away: never longer than the
    /// poll interval, so a lane that polls often retries as often.
    fn away_pauses(&self) -> AwayPauses {
        AwayPauses::between(AWAY_FIRST_PAUSE, AWAY_MAX_PAUSE.min(self.inner.config.poll))
    }

    /// Sleeps `pause`, or until rows are enqueued or `shutdown`.
    async fn wait(&self, lane: &Lane, pause: Duration, shutdown: &CancellationToken) {
        if pause.is_zero() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = lane.wake.notified() => {}
            _ = shutdown.cancelled() => {}
        }
    }

    /// How long a lane sleeps: until its next row falls due, at most `poll`.
    async fn pause_lane(&self, lane: &Lane, took_some: bool) -> Duration {
        let inner = &self.inner;
        match inner.store.next_due_for(&lane.channel).await {
            Ok(Some(next)) => {
                let now = inner.clock.now();
                if next <= now {
                    // Due rows remain: straight on if the last batch made
                    // progress; otherwise another instance is on them, so
                    // do not spin.
                    if took_some { Duration::ZERO } else { Duration::from_millis(100) }
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

/// The rows of `p` and of everything after it in the batch: what goes back
/// (or is composed again) together.
fn this_and_rest(p: &Prepared, rest: impl Iterator<Item = Prepared>) -> Vec<OutboxRow> {
    std::iter::once(p.row().clone()).chain(rest.map(|p| p.row().clone())).collect()
}

/// Lets each channel read what the batch's deliveries need in one
/// statement ([`crate::delivery::channel::Channel::prefetch`]). A claimed
/// batch is one lane's, so one channel's, but the rows are grouped anyway.
async fn prefetch(inner: &super::Inner, prepared: &[Prepared]) {
    let mut by_channel: std::collections::BTreeMap<&str, Vec<&crate::store::OutboxRow>> = Default::default();
    for p in prepared {
        if let Prepared::Deliver(d) = p {
            by_channel.entry(d.row.channel.as_str()).or_default().push(&d.row);
        }
    }
    for (name, rows) in by_channel {
        if let Lookup::Ready(channel) = inner.registry.lookup(name) {
            channel.prefetch(&rows).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Millis = Millis(1_800_000_000_000);

    /// A read from the cursor leaves out only the rows in flight it could
    /// find again; a read from the oldest due row leaves out all of them.
    #[tokio::test]
    async fn a_read_leaves_out_the_rows_in_flight_at_or_after_its_bound() {
        let batch = |rows: &[(&str, i64)]| Recording {
            rows: rows.iter().map(|(id, due)| (id.to_string(), Millis(T.0 + due))).collect(),
            results: tokio::spawn(async { Vec::new() }),
        };
        let recording = VecDeque::from([batch(&[("a", 1), ("b", 2)]), batch(&[("c", 2), ("d", 3), ("e", 4)])]);
        assert_eq!(in_flight_from(&recording, None), ["a", "b", "c", "d", "e"]);
        assert_eq!(in_flight_from(&recording, Some(Millis(T.0 + 2))), ["b", "c", "d", "e"], "due at the bound counts");
        assert_eq!(in_flight_from(&recording, Some(Millis(T.0 + 4))), ["e"]);
        assert!(in_flight_from(&recording, Some(Millis(T.0 + 5))).is_empty());
    }

    #[test]
    fn a_backlog_is_read_on_from_its_position_until_a_batch_is_not_full() {
        let mut cursor = BacklogCursor::default();
        assert_eq!(cursor.bound(T), None, "the first read starts at the oldest due row");
        cursor.after(true, Some(Millis(T.0 - 500)), T);
        assert_eq!(cursor.bound(T), Some(Millis(T.0 - 500)));
        cursor.after(true, Some(Millis(T.0 - 400)), T.plus(Duration::from_millis(10)));
        assert_eq!(cursor.bound(T.plus(Duration::from_millis(20))), Some(Millis(T.0 - 400)));
        cursor.after(false, Some(Millis(T.0 - 300)), T.plus(Duration::from_millis(30)));
        assert_eq!(cursor.bound(T.plus(Duration::from_millis(40))), None, "a batch that is not full starts over");
        cursor.after(true, Some(T), T);
        cursor.after(true, None, T);
        assert_eq!(cursor.bound(T), None, "a failed or empty read starts over");
    }

    #[test]
    fn a_run_of_full_batches_starts_over_after_the_hold() {
        let mut cursor = BacklogCursor::default();
        cursor.after(true, Some(Millis(T.0 - 500)), T);
        // Every batch full, but the run began CURSOR_HOLD ago: rows left
        // behind the position (a failed flush's, a late enqueue with an
        // early due time) are read again from the oldest.
        cursor.after(true, Some(Millis(T.0 - 100)), T.plus(Duration::from_millis(900)));
        assert_eq!(cursor.bound(T.plus(Duration::from_millis(999))), Some(Millis(T.0 - 100)));
        assert_eq!(cursor.bound(T.plus(CURSOR_HOLD)), None);
        cursor.after(true, Some(Millis(T.0 + 10)), T.plus(CURSOR_HOLD));
        assert_eq!(cursor.bound(T.plus(CURSOR_HOLD)), Some(Millis(T.0 + 10)), "a new run from here");
    }
}
