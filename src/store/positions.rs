//! Positions in commit order, for everything a follower reads in order: the
//! event stream and each user's inbox stream.
//!
//! A follower asks for "everything after position P". That is only safe if
//! nothing can later appear below P, i.e. if positions are handed out in the
//! order the rows become visible. Ids taken at insert time (UUIDv7, or a
//! plain sequence) are not: two transactions take ids 7 and 8, 8 commits
//! first, a follower reads it and moves on, then 7 commits behind it and is
//! never read. So positions come from a counter row,
//! `engagement_sequences('stream')`, updated inside the writing transaction:
//! the row lock keeps every other writer of positions waiting until this
//! transaction has committed, so a later position always commits later.
//!
//! The cost is that transactions which append events or inbox messages
//! serialise on that row from the moment they take their positions until
//! they commit. Writers therefore take positions last, after every other
//! lock they need (which also rules out a deadlock through the counter), and
//! take them once per flush for all their rows, not once per row. On
//! PostgreSQL an outcome flush goes further: the reservation, its events,
//! its inbox messages and the notifications are one statement
//! (`append_events_and_inbox`), so the lock is held for that statement and
//! the commit, not for four round trips to the process. Rejected:
//! PostgreSQL's transaction-id snapshots (`pg_snapshot_xmin`), which give a
//! safe read horizon without serialising writers but exist only there, and a
//! background sequencer that numbers committed rows afterwards, which writes
//! every row twice and delays every event.

use sqlx::{AnyConnection, Row};

use super::queries::Query;
use super::rows::{Fetch, Run};
use super::{Dialect, StoreError};

/// Reserves `n` positions inside the caller's transaction and returns the
/// first; the caller uses `first .. first + n`. Call it after every other
/// write of the transaction that takes row locks. (The counter, the row
/// `'stream'`, is shared by events and inbox messages: positions are unique
/// across both, and increasing in commit order within each.)
pub(crate) async fn reserve(conn: &mut AnyConnection, d: Dialect, n: usize) -> Result<i64, StoreError> {
    let n = i64::try_from(n).expect("a flush never holds 2^63 rows");
    let reserve = sqlx::query(Query::ReservePositions.sql(d)).bind(n);
    let last: i64 = if d.has_update_returning() {
        reserve.one(&mut *conn, "reserve positions").await?.try_get(0)
    } else {
        // No RETURNING: read the row back; it is ours until commit.
        reserve.run(&mut *conn, "reserve positions").await?;
        sqlx::query(Query::NewestPosition.sql(d)).one(&mut *conn, "reserve positions: read back").await?.try_get(0)
    }
    .map_err(StoreError::db("reserve positions: read"))?;
    Ok(last - n + 1)
}

/// The newest position of a committed transaction (0 before the first).
/// A plain read: it waits for no writer (every dialect reads the committed
/// row without its lock), and a writer that has taken positions but not
/// committed has nothing visible to resume after yet.
pub(crate) async fn newest(pool: &sqlx::AnyPool, d: Dialect) -> Result<i64, StoreError> {
    sqlx::query(Query::NewestPosition.sql(d))
        .optional(pool, "newest position")
        .await?
        .map_or(Ok(0), |r| r.try_get(0))
        .map_err(StoreError::db("newest position"))
}
