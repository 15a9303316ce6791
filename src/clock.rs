//! Time, as the worker and the store see it.
//!
//! Every decision about time (is a row due, has a claim gone stale, has the
//! grace window passed) reads a [`Clock`] instead of the system time, so tests
//! can set the time and step it forward instead of sleeping and hoping.
//!
//! A service reads [`DbClock`]: the database's clock, not the machine's.
//! Several instances share one database, and every time they compare
//! (`due_at`, `claimed_at`, `expires_at`) was written by one of them; if each
//! trusted its own clock, an instance an hour ahead would take back every
//! claim the others hold as stale, send delayed messages an hour early and
//! expire fresh ones. The database's clock is the one every instance can
//! agree on.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};

/// A point in time: milliseconds since the Unix epoch, UTC.
///
/// Stored as a plain integer in all three SQL dialects (see `store`), so this
/// is the one place that turns it into something a person reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Millis(pub i64);

impl Millis {
    pub fn plus(self, d: Duration) -> Millis {
        Millis(self.0.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    pub fn minus(self, d: Duration) -> Millis {
        Millis(self.0.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// How long after `earlier` this is; zero if it is not after.
    pub fn since(self, earlier: Millis) -> Duration {
        Duration::from_millis(u64::try_from(self.0 - earlier.0).unwrap_or(0))
    }

    pub fn to_rfc3339(self) -> String {
        DateTime::<Utc>::from_timestamp_millis(self.0)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
            .unwrap_or_else(|| format!("{}ms", self.0))
    }

    pub fn from_datetime(t: DateTime<Utc>) -> Millis {
        Millis(t.timestamp_millis())
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// Where "now" comes from.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Millis;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        Millis(Utc::now().timestamp_millis())
    }
}

/// A clock that only moves when told to; shared by cloning.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn at(start: Millis) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start.0)))
    }

    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX), Ordering::SeqCst);
    }

    pub fn set(&self, t: Millis) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        Millis(self.0.load(Ordering::SeqCst))
    }
}

/// The database's clock, read from this process without a round trip.
///
/// Every `refresh` it asks the database for its time and notes the local
/// monotonic instant halfway through the round trip; `now()` is that reading
/// plus the monotonic time since. The machine's wall clock is never read for
/// a decision, so setting it wrong (or `faketime`) changes nothing; it is
/// only compared with the database's to report the skew. If a refresh fails
/// (the database is away) the last reading keeps counting on the monotonic
/// clock, which drifts by milliseconds a day at most. Rejected: putting the
/// database's `now()` into every statement, which would tie each query to
/// one dialect's time function and take time out of the tests' hands.
pub struct DbClock {
    reading: RwLock<Reading>,
    /// The machine's wall clock, read only to report the skew.
    local: Arc<dyn Clock>,
    skew_ms: AtomicI64,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    database: Millis,
    at: Instant,
}

impl DbClock {
    /// Takes a first reading (`sample` answers the database's time) and
    /// returns the clock; the caller refreshes it with [`DbClock::refresh`].
    pub async fn start<F, Fut, E>(sample: F, local: Arc<dyn Clock>) -> Result<Arc<DbClock>, E>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Millis, E>>,
    {
        let reading = Self::read(&sample).await?;
        let clock = Arc::new(DbClock { reading: RwLock::new(reading), local, skew_ms: AtomicI64::new(0) });
        clock.note_skew(reading);
        Ok(clock)
    }

    async fn read<F, Fut, E>(sample: &F) -> Result<Reading, E>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Millis, E>>,
    {
        let before = Instant::now();
        let database = sample().await?;
        let rtt = before.elapsed();
        Ok(Reading { database, at: before + rtt / 2 })
    }

    /// Takes a new reading; on failure keeps counting from the last one.
    pub async fn refresh<F, Fut, E>(&self, sample: &F) -> Result<(), E>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Millis, E>>,
    {
        let reading = Self::read(sample).await?;
        *self.reading.write().unwrap_or_else(std::sync::PoisonError::into_inner) = reading;
        self.note_skew(reading);
        Ok(())
    }

    fn note_skew(&self, reading: Reading) {
        let local = self.local.now().0 - i64::try_from(reading.at.elapsed().as_millis()).unwrap_or(0);
        let skew = local - reading.database.0;
        let before = self.skew_ms.swap(skew, Ordering::Relaxed);
        WALL_CLOCK_SKEW_MS.store(skew, Ordering::Relaxed);
        // Say so once when it appears, not on every refresh.
        if skew.abs() >= 1_000 && (skew - before).abs() >= 1_000 {
            tracing::warn!(
                skew_seconds = skew as f64 / 1000.0,
                "this machine's clock differs from the database's; Herald times every claim, due time and \
                 expiry by the database's clock, so its decisions are unaffected, but this machine's own \
                 timestamps (logs) are off by that much"
            );
        }
    }

    /// How far this machine's wall clock is ahead of the database's (negative:
    /// behind), at the last reading, in milliseconds.
    pub fn skew_ms(&self) -> i64 {
        self.skew_ms.load(Ordering::Relaxed)
    }
}

/// The skew the service's [`DbClock`] last measured, for [`id_time`].
static WALL_CLOCK_SKEW_MS: AtomicI64 = AtomicI64::new(0);

/// The time new ids carry: this machine's clock, corrected to the
/// database's once a [`DbClock`] has measured the difference. (Ids are made
/// deep inside the store, where no clock is passed; a wrong time there only
/// misorders lists, so a process-wide correction is enough.)
pub fn id_time() -> Millis {
    Millis(SystemClock.now().0 - WALL_CLOCK_SKEW_MS.load(Ordering::Relaxed))
}

impl Clock for DbClock {
    fn now(&self) -> Millis {
        let r = *self.reading.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        r.database.plus(r.at.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at(Millis(1_000));
        assert_eq!(clock.now(), Millis(1_000));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), Millis(3_000));
    }

    #[tokio::test]
    async fn a_database_clock_ignores_the_machines_wall_clock() {
        // This machine's wall clock is an hour ahead; the database says T.
        let database = Millis(1_700_000_000_000);
        let local: Arc<dyn Clock> = Arc::new(ManualClock::at(database.plus(Duration::from_secs(3600))));
        let clock = DbClock::start(|| async { Ok::<_, ()>(database) }, local).await.unwrap();
        let now = clock.now();
        assert!(now >= database && now.0 - database.0 < 1_000, "{now} is the database's time, not the machine's");
        assert!((clock.skew_ms() - 3_600_000).abs() < 1_000, "skew {} ms", clock.skew_ms());
        // A failed refresh keeps the last reading.
        assert!(clock.refresh(&|| async { Err::<Millis, _>(()) }).await.is_err());
        assert!(clock.now().0 - database.0 < 1_000);
    }

    #[test]
    fn millis_reads_as_rfc3339() {
        assert_eq!(Millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Millis(5_000).since(Millis(7_000)), Duration::ZERO);
    }
}
