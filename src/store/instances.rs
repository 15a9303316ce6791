//! Instance leases: `engagement_instances`, one row per `herald serve`
//! renewed on the database's clock, and the rescue of the rows an instance
//! whose lease lapsed was holding.
//!
//! # Why a lease, when there is already the stale window
//! `worker.stale` has to be longer than the slowest legitimate delivery, so
//! it is long (15 minutes by default), and a claim's age is all it knows.
//! A lease says something the age of a claim cannot: whether the instance
//! holding it is still there. An instance that cannot renew its lease starts
//! no new delivery, and a delivery already started ends within
//! `worker.deliver_timeout`; so once a lease has been lapsed for longer
//! than `deliver_timeout`, nothing of that instance is still delivering and
//! its rows can be taken back. The rescue clears the claim token, so an
//! outcome the old owner writes late is refused by the same fence as a
//! stale one. The stale window remains for rows claimed without a lease
//! (tests, `herald bench`) and as the last resort.

use async_trait::async_trait;

use super::queries::Query;
use super::rows::from_columns;
use super::rows::{Fetch, Run};
use super::{SqlStore, StoreError};
use crate::clock::Millis;

/// One instance's lease, as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InstanceRow {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub started_at: Millis,
    pub renewed_at: Millis,
    pub expires_at: Millis,
}

from_columns!(InstanceRow: id, host, pid, started_at, renewed_at, expires_at);

/// Who is renewing: the process's identity, fixed at start.
#[derive(Debug, Clone)]
pub struct InstanceIdentity {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub started_at: Millis,
}

/// How long an instance row whose lease lapsed is kept (for `herald
/// status` and for operators asking "which instance held this row"). Its
/// rows are rescued whether or not the row is still there.
pub const LAPSED_INSTANCE_RETENTION: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

#[async_trait]
pub trait InstanceStore {
    /// Takes or renews `who`'s lease until `expires_at` (written as of
    /// `now`, the database's clock).
    async fn renew_lease(&self, who: &InstanceIdentity, now: Millis, expires_at: Millis) -> Result<(), StoreError>;

    /// Gives the lease up (a clean shutdown): nothing of this instance is
    /// left to wait for.
    async fn end_lease(&self, id: &str) -> Result<(), StoreError>;

    /// Takes back `sending` rows claimed before `cutoff` by an instance that
    /// holds no lease valid at `cutoff` (lapsed, given up, or never written):
    /// `cutoff` is now minus `deliver_timeout`, so any delivery that
    /// instance started has ended. Also forgets instance rows lapsed for
    /// longer than [`LAPSED_INSTANCE_RETENTION`]. Returns the rows taken back.
    async fn rescue_lapsed(&self, cutoff: Millis, now: Millis) -> Result<u64, StoreError>;

    /// Every instance row, newest lease first.
    async fn instances(&self) -> Result<Vec<InstanceRow>, StoreError>;
}

#[async_trait]
impl InstanceStore for SqlStore {
    async fn renew_lease(&self, who: &InstanceIdentity, now: Millis, expires_at: Millis) -> Result<(), StoreError> {
        sqlx::query(self.sql(Query::RenewLease))
            .bind(who.id.clone())
            .bind(who.host.clone())
            .bind(who.pid)
            .bind(who.started_at.0)
            .bind(now.0)
            .bind(expires_at.0)
            .run(self.writer(), "renew instance lease")
            .await?;
        Ok(())
    }

    async fn end_lease(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query(self.sql(Query::EndLease)).bind(id.to_owned()).run(self.writer(), "end instance lease").await?;
        Ok(())
    }

    async fn rescue_lapsed(&self, cutoff: Millis, now: Millis) -> Result<u64, StoreError> {
        // The words name the time: `last_error` says when it was taken back.
        let detail = format!(
            "claim taken back at {now}: the instance holding it lost its lease (it stopped, or lost the database) \
             and its deliveries had ended"
        );
        let n = sqlx::query(self.sql(Query::RescueLapsed))
            .bind(detail)
            .bind(now.0)
            .bind(cutoff.0)
            .bind(cutoff.0)
            .run(self.writer(), "rescue the rows of lapsed instances")
            .await?;
        sqlx::query(self.sql(Query::ForgetLapsedInstances))
            .bind(now.minus(LAPSED_INSTANCE_RETENTION).0)
            .run(self.writer(), "forget lapsed instances")
            .await?;
        Ok(n)
    }

    async fn instances(&self) -> Result<Vec<InstanceRow>, StoreError> {
        sqlx::query_as(self.sql(Query::ListInstances)).all(self.pool(), "list instances").await
    }
}
