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

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn race() -> StoreError {
        StoreError::Injected { what: "lost race", lost_race: true }
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
