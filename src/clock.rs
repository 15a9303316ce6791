//! Time, as the worker and the store see it.
//!
//! Every decision about time (is a row due, has a claim gone stale, has the
//! grace window passed) reads a [`Clock`] instead of the system time, so tests
//! can set the time and step it forward instead of sleeping and hoping.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

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

    #[test]
    fn millis_reads_as_rfc3339() {
        assert_eq!(Millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Millis(5_000).since(Millis(7_000)), Duration::ZERO);
    }
}
