//! The worker's upkeep beside delivering: renewing this instance's lease,
//! rescuing the rows of instances whose lease lapsed, and reclaiming stale
//! claims (rows claimed by an instance without a lease, or whose sending
//! never started) — the "maintenance" River runs as its own services, here
//! methods the run loop schedules between claims.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::lane::Claimed;
use super::lease::Lease;
use super::record::InFlight;
use super::{TickReport, Worker};
use crate::store::race::AwayPauses;
use crate::store::{StoreError, new_id};

impl Worker {
    /// One heartbeat: renews the lease (when this worker has one) and takes
    /// back the rows of instances whose lease lapsed. What the run loop
    /// does every third of the lease; tests call it with their clock.
    pub async fn heartbeat(&self) -> Result<u64, StoreError> {
        if let Some(lease) = &self.inner.lease {
            lease.renew(self.inner.store.as_ref(), self.inner.clock.now()).await?;
        }
        Ok(self.rescue().await)
    }

    /// Renews the lease every third of it until `shutdown`; while renewing
    /// fails, tries again on [`AwayPauses`] (the database is away: the lease
    /// should be back as soon as it is).
    pub(super) async fn keep_lease(&self, lease: &Lease, first: Duration, shutdown: CancellationToken) {
        let mut away = AwayPauses::new();
        let mut failing = first.is_zero();
        tokio::select! {
            _ = tokio::time::sleep(first) => {}
            _ = shutdown.cancelled() => {}
        }
        while !shutdown.is_cancelled() {
            let pause = match self.heartbeat().await {
                Ok(_) => {
                    if failing {
                        tracing::info!(instance = lease.instance(), "lease renewed; deliveries resume");
                    }
                    failing = false;
                    away.reset();
                    lease.renew_every()
                }
                Err(e) => {
                    let held = lease.is_held(self.inner.clock.now());
                    if !failing {
                        tracing::warn!(instance = lease.instance(), error = %e, held, "could not renew the lease; trying again");
                    } else {
                        tracing::debug!(instance = lease.instance(), error = %e, held, "could not renew the lease");
                    }
                    failing = true;
                    away.next_pause()
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }

    /// Takes back the rows of instances whose lease lapsed more than
    /// `deliver_timeout` ago; never fails the caller.
    pub(super) async fn rescue(&self) -> u64 {
        let inner = &self.inner;
        let now = inner.clock.now();
        let cutoff = now.minus(inner.config.deliver_timeout);
        let result = crate::store::race::retry_lost_race("rescue", || inner.store.rescue_lapsed(cutoff, now)).await;
        match result {
            Ok(n) => {
                if n > 0 {
                    inner.metrics.rescued("lease_lapsed", n);
                    tracing::warn!(rows = n, "took back the rows of an instance whose lease lapsed");
                    // They are due: wake this instance's lanes, which may
                    // be asleep until `poll`.
                    inner.store.enqueued_signal().notify_one();
                }
                n
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not look for the rows of lapsed instances; the next heartbeat does");
                0
            }
        }
    }

    /// Every few seconds: stale claims taken back, and the rows of channels
    /// this instance cannot deliver on ended with the reason.
    pub(super) async fn maintain(&self, shutdown: CancellationToken) {
        let every = reclaim_every(self.inner.config.stale);
        while !shutdown.is_cancelled() {
            let mut report = TickReport { reclaimed: self.reclaim().await, ..TickReport::default() };
            let unknown = if self.may_start() { self.claim_unknown().await } else { Ok(Claimed::none()) };
            match unknown {
                Ok(unknown) => {
                    let mut inflight = InFlight::new();
                    report.released += self.dispatch(unknown, &shutdown, &mut inflight).await;
                    self.finish_inflight(&mut inflight, &shutdown, &mut report).await;
                }
                Err(e) if e.is_lost_race() => {
                    tracing::debug!(error = %e, "looking for rows of channels this instance lacks lost a race; next round")
                }
                Err(e) => tracing::warn!(error = %e, "could not look for rows of channels this instance lacks"),
            }
            self.progress(|r| r.add(&report));
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }

    /// Claims due rows of channels no lane serves, to end them with the
    /// registry's reason.
    pub(super) async fn claim_unknown(&self) -> Result<Claimed, StoreError> {
        let inner = &self.inner;
        let token = new_id();
        let known: Vec<&str> = inner.lanes.iter().map(|l| l.channel.as_str()).collect();
        let (started, now) = (std::time::Instant::now(), inner.clock.now());
        // On Galera this UPDATE can lose a certification race like any
        // claim: tried again at once, not a WARN (a three-node cluster
        // under load loses such races every few seconds).
        let rows = crate::store::race::retry_lost_race("claim unknown channels", || {
            inner.store.claim_unknown_channels(&known, now, inner.config.batch, &token)
        })
        .await?;
        self.note_taken(&rows, started, now);
        Ok(Claimed { token, rows, room: None })
    }

    /// Takes back claims older than the stale window; never fails the caller.
    pub(super) async fn reclaim(&self) -> u64 {
        let inner = &self.inner;
        let now = inner.clock.now();
        let cutoff = now.minus(inner.config.stale);
        match crate::store::race::retry_lost_race("reclaim", || inner.store.reclaim_stale(cutoff, now)).await {
            Ok(n) => {
                if n > 0 {
                    inner.metrics.reclaimed(n);
                    inner.metrics.rescued("stale", n);
                    tracing::warn!(rows = n, "took back stale claims");
                    inner.store.enqueued_signal().notify_one();
                }
                n
            }
            Err(e) if e.is_lost_race() => {
                tracing::info!(error = %e, "stale-claim reclaim kept losing races with other instances; the next sweep retries");
                0
            }
            Err(e) => {
                tracing::error!(error = %e, "failed to reclaim stale rows");
                0
            }
        }
    }
}

/// How often the run loop looks for stale claims: a quarter of the window,
/// at most once a minute and at least once every five seconds.
fn reclaim_every(stale: Duration) -> Duration {
    (stale / 4).clamp(Duration::from_secs(5), Duration::from_secs(60))
}
