//! Lost races: a transaction the database refused because another one won
//! (a Galera certification failure or an InnoDB deadlock, 1213/40001; a
//! PostgreSQL serialization failure or deadlock, 40001/40P01; SQLite's
//! busy), or because it reached a server that cannot write (a standby
//! answering "read-only transaction" just after a failover).
//!
//! On a cluster these are routine, not failures: the transaction did
//! nothing and the same transaction again almost always goes through. So
//! [`retry_lost_race`] tries it again at once, with jitter (two instances
//! that collided must not collide again in lockstep), a bounded number of
//! times, counts each in `herald_lost_races_total{op}`, and logs at DEBUG.
//! Only a race lost [`ATTEMPTS`] times in a row reaches the caller.
//! The retry policy is backon's exponential builder rather than a loop of
//! our own.
//!
//! A database that is *away* (refused connections, timeouts, a failover) is
//! the other kind of retry, and the slower one: [`AwayPauses`] is its
//! schedule, from 250 ms doubling to 2 s, shared by every loop that waits
//! for the database to come back. Which layer retries what:
//!
//! - a lost race: [`retry_lost_race`], around one transaction, at most
//!   [`ATTEMPTS`] times within about a third of a second;
//! - the database away, for an answer someone waits for (a trigger's
//!   `202`, a read a delivery depends on): [`retry_while_away`] or the
//!   intake's in-doubt check, for a bounded time, then the error;
//! - the database away, for work nobody waits for (claim sweeps, the lease
//!   renewal, outcomes kept in memory, LISTEN's connection): a loop with
//!   [`AwayPauses`] until shutdown;
//! - a delivery that failed for a passing reason: the outbox row itself
//!   (`worker.retry`, minutes), never a loop in memory.
//!
//! The layers do not stack: a lost race inside an away-loop is retried by
//! [`retry_lost_race`] only, and the loop's next pause starts over.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder, Retryable};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::StoreError;

/// How many times one operation is tried in all before a lost race is the
/// caller's error.
pub const ATTEMPTS: usize = 6;

/// The first pause is a few milliseconds (with jitter up to as much again),
/// doubling to at most 100 ms: "at once", without two instances retrying in
/// lockstep.
fn policy() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(5))
        .with_max_delay(Duration::from_millis(100))
        .with_jitter()
        .with_max_times(ATTEMPTS - 1)
}

/// The first pause while the database is away.
pub const AWAY_FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause while the database is away: a failover is noticed
/// within two seconds of its end, and a database that is down is asked
/// only every two seconds by each loop.
pub const AWAY_MAX_PAUSE: Duration = Duration::from_secs(2);

/// The pauses between tries while the database is away: from
/// [`AWAY_FIRST_PAUSE`], doubling to a cap, for as long as the caller keeps
/// trying; [`reset`](Self::reset) after a success. No jitter: each loop
/// waits for the same database to come back, and there is one loop of each
/// kind per instance.
#[derive(Debug)]
pub struct AwayPauses {
    schedule: ExponentialBuilder,
    pauses: ExponentialBackoff,
    max: Duration,
}

impl AwayPauses {
    /// 250 ms doubling to 2 s.
    pub fn new() -> Self {
        Self::between(AWAY_FIRST_PAUSE, AWAY_MAX_PAUSE)
    }

    /// From `first` doubling to `max` (at least `first`).
    pub fn between(first: Duration, max: Duration) -> Self {
        let max = max.max(first);
        let schedule = ExponentialBuilder::default().with_min_delay(first).with_max_delay(max).without_max_times();
        AwayPauses { schedule, pauses: schedule.build(), max }
    }

    /// The pause before the next try.
    pub fn next_pause(&mut self) -> Duration {
        self.pauses.next().unwrap_or(self.max)
    }

    /// Starts over from the first pause (the database answered).
    pub fn reset(&mut self) {
        self.pauses = self.schedule.build();
    }
}

impl Default for AwayPauses {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RaceLabels {
    /// What lost the race: "accept triggers", "claim", "record outcomes", ...
    pub op: String,
}

/// Races lost in this process, by operation (registered by
/// [`crate::metrics::Metrics`]).
pub static LOST_RACES: LazyLock<Family<RaceLabels, Counter>> = LazyLock::new(Family::default);

/// Counts one lost race of `op`.
pub fn count(op: &str) {
    LOST_RACES.get_or_create(&RaceLabels { op: op.to_owned() }).inc();
}

/// How many races `op` lost in this process so far.
pub fn lost(op: &str) -> u64 {
    LOST_RACES.get_or_create(&RaceLabels { op: op.to_owned() }).get()
}

/// Runs `f`, and again while it loses a race (see the module docs), up to
/// [`ATTEMPTS`] times in all.
pub async fn retry_lost_race<T, F, Fut>(op: &'static str, f: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    f.retry(policy())
        .sleep(tokio::time::sleep)
        .when(StoreError::is_lost_race)
        .notify(|e, pause| {
            count(op);
            tracing::debug!(op, error = %e, retry_in = ?pause, "lost a race with another transaction; trying again");
        })
        .await
}

/// How long a read the delivery of a row depends on (the suppression list,
/// the row's rule and recipient) waits for a database that is away before
/// the row is retried the slow way (`worker.retry`, 5 minutes by default):
/// a failover takes seconds to a few tens of seconds, and a row that waits
/// it out is delivered then, not minutes later. Below the default
/// `worker.deliver_timeout`, which bounds the whole delivery.
pub const AWAY_WAIT: Duration = Duration::from_secs(45);

/// Runs `f`, and again while the database is away or the race is lost
/// (from 250 ms, doubling to 2 s), for at most `wait`.
pub async fn retry_while_away<T, F, Fut>(op: &'static str, wait: Duration, mut f: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    let mut pauses = AwayPauses::new();
    loop {
        let pause = pauses.next_pause();
        match f().await {
            Err(e) if (e.is_unavailable() || e.is_lost_race()) && tokio::time::Instant::now() + pause < deadline => {
                if e.is_lost_race() {
                    count(op);
                }
                tracing::debug!(op, error = %e, retry_in = ?pause, "the database is away; waiting for it");
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn race() -> StoreError {
        StoreError::Injected { what: "lost race", lost_race: true }
    }

    #[test]
    fn away_pauses_double_to_the_cap_and_start_over_after_a_success() {
        let ms = Duration::from_millis;
        let mut away = AwayPauses::new();
        let seen: Vec<Duration> = (0..6).map(|_| away.next_pause()).collect();
        assert_eq!(seen, [ms(250), ms(500), ms(1000), ms(2000), ms(2000), ms(2000)]);
        away.reset();
        assert_eq!(away.next_pause(), ms(250));
        // A cap below the first pause (a lane polling every 100 ms) is the
        // first pause, every time.
        let mut fast = AwayPauses::between(ms(250), ms(100));
        assert_eq!([fast.next_pause(), fast.next_pause()], [ms(250), ms(250)]);
    }

    #[tokio::test]
    async fn a_lost_race_is_tried_again_and_counted() {
        let calls = AtomicUsize::new(0);
        let before = lost("test: two races");
        let out = retry_lost_race("test: two races", || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 { Err(race()) } else { Ok(7) }
        })
        .await;
        assert_eq!(out.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(lost("test: two races") - before, 2);
    }

    #[tokio::test]
    async fn a_read_waits_for_the_database_within_its_bound() {
        let calls = AtomicUsize::new(0);
        let away = || StoreError::Injected { what: "away", lost_race: false };
        let out = retry_while_away("test: away", Duration::from_secs(2), || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 { Err(away()) } else { Ok(1) }
        })
        .await;
        assert_eq!(out.unwrap(), 1);
        let calls = AtomicUsize::new(0);
        let started = tokio::time::Instant::now();
        let out: Result<(), _> = retry_while_away("test: away", Duration::from_secs(1), || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(away())
        })
        .await;
        assert!(out.is_err());
        assert!(started.elapsed() <= Duration::from_secs(1), "{:?}", started.elapsed());
        // Tried at 0, 0.25 and 0.75 s: the next pause (1 s) would pass the
        // bound.
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn retries_are_bounded_and_other_errors_are_not_retried() {
        let calls = AtomicUsize::new(0);
        let out: Result<(), _> = retry_lost_race("test: always", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(race())
        })
        .await;
        assert!(out.unwrap_err().is_lost_race());
        assert_eq!(calls.load(Ordering::SeqCst), ATTEMPTS);

        let calls = AtomicUsize::new(0);
        let out: Result<(), _> = retry_lost_race("test: other", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::Injected { what: "disk full", lost_race: false })
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
