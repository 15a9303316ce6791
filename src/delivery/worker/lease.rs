//! This instance's lease (see [`crate::store::InstanceStore`] for why there
//! is one), and the heartbeat that renews it and rescues the rows of
//! instances whose lease lapsed.
//!
//! The lease is judged on the worker's clock, which in a service is the
//! database's ([`crate::clock::DbClock`]): the instance that renews and the
//! instances that decide it lapsed read the same time. Locally the lease
//! counts as held until the start of the last renewal that succeeded plus
//! the lease, less a tenth of it, so this instance stops starting
//! deliveries a little before anyone else could think it gone.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::clock::Millis;
use crate::store::{InstanceIdentity, Store, StoreError};

pub struct Lease {
    who: InstanceIdentity,
    duration: Duration,
    /// Milliseconds on the worker's clock; `i64::MIN` until the first
    /// renewal.
    held_until: AtomicI64,
}

impl Lease {
    pub fn new(who: InstanceIdentity, duration: Duration) -> Lease {
        Lease { who, duration, held_until: AtomicI64::new(i64::MIN) }
    }

    pub fn instance(&self) -> &str {
        &self.who.id
    }

    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Whether this instance may start a delivery at `now`.
    pub fn is_held(&self, now: Millis) -> bool {
        now.0 < self.held_until.load(Ordering::SeqCst)
    }

    /// Renews the lease as of `now`; on success it is held until
    /// `now + duration - duration/10`.
    pub async fn renew(&self, store: &dyn Store, now: Millis) -> Result<(), StoreError> {
        store.renew_lease(&self.who, now, now.plus(self.duration)).await?;
        let until = now.plus(self.duration - self.duration / 10);
        self.held_until.fetch_max(until.0, Ordering::SeqCst);
        Ok(())
    }

    /// How often the heartbeat renews (and looks for lapsed instances'
    /// rows): a third of the lease, so two renewals in a row can fail
    /// before it lapses, and at least every 5 s, so a lapsed instance's
    /// rows wait at most that long past lease + deliver_timeout.
    pub fn renew_every(&self) -> Duration {
        (self.duration / 3).min(Duration::from_secs(5))
    }
}

/// A process identity for a lease: a fresh id, this machine's host name and
/// this process's id, started at `now`.
pub fn identity(now: Millis) -> InstanceIdentity {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    InstanceIdentity { id: crate::store::new_id(), host, pid: i64::from(std::process::id()), started_at: now }
}
