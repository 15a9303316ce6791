//! Retention: old rows pruned so every table's cost stays flat as the
//! years pass, without losing what "did user X get it" needs.
//!
//! Every `serve` instance runs this loop; there is no leader. Each pass
//! deletes, table by table, rows older than that table's period in batches
//! of `retention.batch`, oldest first, until a batch comes back short (the
//! table is caught up) or the pass has done `MAX_BATCHES_PER_PASS` batches
//! (a large backlog, say after retention was first switched on, is worked
//! off over several passes rather than in one long burst). Two instances on
//! the same rows delete the same old rows: a lost race is left to the next
//! pass. The alternative, one elected pruner, would need a lease for a job
//! that is harmless to run twice.
//!
//! Ages are measured on the service's clock, which in `serve` is the
//! database's (see [`crate::clock::DbClock`]): an instance whose own clock
//! runs a year ahead does not prune a year early.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::RetentionSettings;
use crate::metrics::Metrics;
use crate::store::{Prunable, SqlStore};

/// A pass stops after this many batches of one table, so a backlog of
/// millions of rows is spread over passes and other writers get their turn.
const MAX_BATCHES_PER_PASS: u32 = 50;

/// What one pass deleted, per table.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PruneReport {
    pub deleted: Vec<(Prunable, u64)>,
}

impl PruneReport {
    pub fn total(&self) -> u64 {
        self.deleted.iter().map(|(_, n)| n).sum()
    }

    pub fn of(&self, table: Prunable) -> u64 {
        self.deleted.iter().filter(|(t, _)| *t == table).map(|(_, n)| n).sum()
    }
}

pub struct Retention {
    store: SqlStore,
    clock: Arc<dyn Clock>,
    settings: RetentionSettings,
    metrics: Metrics,
}

impl Retention {
    pub fn new(store: SqlStore, clock: Arc<dyn Clock>, settings: RetentionSettings, metrics: Metrics) -> Retention {
        Retention { store, clock, settings, metrics }
    }

    /// Prunes every `interval` until `shutdown`. The first pass waits one
    /// interval, so a start-up is not slowed by it.
    pub async fn run(&self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.settings.interval) => {}
                _ = shutdown.cancelled() => return,
            }
            let report = self.pass(&shutdown).await;
            if report.total() > 0 {
                let by_table: Vec<String> = report.deleted.iter().map(|(t, n)| format!("{}={n}", t.key())).collect();
                tracing::info!(rows = report.total(), tables = %by_table.join(" "), "pruned old rows");
            }
        }
    }

    /// One pass over every table with a retention period.
    pub async fn pass(&self, shutdown: &CancellationToken) -> PruneReport {
        let mut report = PruneReport::default();
        for table in Prunable::ALL {
            let Some(period) = self.settings.period(table) else { continue };
            let cutoff = self.clock.now().minus(period);
            let mut deleted = 0;
            for _ in 0..MAX_BATCHES_PER_PASS {
                if shutdown.is_cancelled() {
                    break;
                }
                match self.store.prune(table, cutoff, self.settings.batch).await {
                    Ok(n) => {
                        deleted += n;
                        if n < u64::from(self.settings.batch) {
                            break;
                        }
                        // Let the hot path's writers in between batches
                        // (SQLite has one writer).
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(e) if e.is_contention() => {
                        tracing::debug!(table = table.key(), error = %e, "pruning lost a race; the next pass goes on");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(table = table.key(), error = %e, "could not prune old rows; the next pass retries");
                        break;
                    }
                }
            }
            if deleted > 0 {
                self.metrics.pruned(table.key(), deleted);
                report.deleted.push((table, deleted));
            }
        }
        report
    }
}
