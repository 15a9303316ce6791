//! How much sqlx's `Any` driver, through which Herald runs every statement,
//! costs its two hottest SQLite statements against the native
//! `sqlx::Sqlite` driver: the direct lane's read of 1,000 due rows
//! (`peek_channel`) and the outcome flush's fenced update of 1,000 rows
//! (`record_unclaimed_values`) and the flush's largest insert, 1,000
//! send-log rows of 13 columns (`append_sends_values`), each taken from
//! Herald's own SQL. The writes run in a transaction that is rolled back,
//! so every batch finds the same rows; the two drivers take turns going
//! first. The figures are in docs/performance.md ("One trigger to many").
//!
//!   herald bench --fanout --subscribers 200000 --bench-database-url sqlite:///tmp/fan.db
//!   cargo run --release --example sqlx_any_vs_native -- sqlite:///tmp/fan.db
//!
//! It sets every row of that database back to `scheduled` first.
use std::time::{Duration, Instant};

use herald::store::Dialect;
use herald::store::queries::Query;
use sqlx::Row;

const ROWS: usize = 1000;
const BATCHES: i64 = 20;
/// Rows per statement, as a flush cuts them on SQLite (`values::MAX_ROWS`).
const RUN: usize = 256;

/// The ids and versions of up to [`ROWS`] rows due from `from`, read
/// through `$pool`, and how long the read and the decoding took.
macro_rules! read {
    ($pool:expr, $from:expr) => {{
        let started = Instant::now();
        let rows = sqlx::query(Query::PeekChannel.sql(Dialect::Sqlite))
            .bind("inbox")
            .bind($from)
            .bind(i64::MAX)
            .bind("[]")
            .bind(ROWS as i64)
            .fetch_all(&$pool)
            .await
            .unwrap();
        let ids: Vec<(String, i64)> =
            rows.iter().map(|r| (r.get::<String, _>("id"), r.get::<i64, _>("updated_at"))).collect();
        (ids, started.elapsed())
    }};
}

/// How long the fenced update of `$rows` to `sent` took through `$pool`
/// (rolled back; every row must win), in statements of [`RUN`] rows as a
/// flush runs it.
macro_rules! update {
    ($pool:expr, $rows:expr) => {{
        let mut tx = $pool.begin().await.unwrap();
        let started = Instant::now();
        let mut won = 0;
        for run in $rows.chunks(RUN) {
            let sql = Query::RecordUnclaimedValues.sql_for_rows(Dialect::Sqlite, run.len());
            let mut query = sqlx::query(&sql);
            for (id, version) in run {
                query = query
                    .bind(id.clone())
                    .bind(*version)
                    .bind("sent")
                    .bind(None::<String>)
                    .bind(None::<i64>)
                    .bind(1_i64)
                    .bind(None::<i64>);
            }
            won += query.bind(0_i64).fetch_all(&mut *tx).await.unwrap().len();
        }
        let took = started.elapsed();
        assert_eq!(won, $rows.len(), "every row is still scheduled and unchanged");
        tx.rollback().await.unwrap();
        took
    }};
}

/// How long appending a send-log row for each of `$rows` took through
/// `$pool` (rolled back), in statements of [`RUN`] rows.
macro_rules! append_sends {
    ($pool:expr, $rows:expr) => {{
        let mut tx = $pool.begin().await.unwrap();
        let started = Instant::now();
        let mut written = 0;
        for run in $rows.chunks(RUN) {
            let sql = Query::AppendSendsValues.sql_for_rows(Dialect::Sqlite, run.len());
            let mut query = sqlx::query(&sql);
            for (id, _) in run {
                query = query
                    .bind(herald::store::new_id())
                    .bind(id.clone())
                    .bind(Some("rule"))
                    .bind(Some("trigger"))
                    .bind("user")
                    .bind("inbox")
                    .bind(Some("inbox"))
                    .bind(None::<String>)
                    .bind("sent")
                    .bind(None::<String>)
                    .bind(1_i64)
                    .bind(None::<String>)
                    .bind(0_i64);
            }
            written += query.execute(&mut *tx).await.unwrap().rows_affected();
        }
        let took = started.elapsed();
        assert_eq!(written, $rows.len() as u64, "one send-log row per outbox row");
        tx.rollback().await.unwrap();
        took
    }};
}

/// `$what!(any, …)` and `$what!(native, …)`, the native driver first in
/// odd batches: (`Any`'s result, the native one's).
macro_rules! in_turn {
    ($batch:expr, $what:ident, $any:ident, $native:ident, $($arg:expr),*) => {
        if $batch % 2 == 0 {
            ($what!($any, $($arg),*), $what!($native, $($arg),*))
        } else {
            let native_first = $what!($native, $($arg),*);
            ($what!($any, $($arg),*), native_first)
        }
    };
}

#[tokio::main]
async fn main() {
    sqlx::any::install_default_drivers();
    let url = std::env::args().nth(1).expect("usage: sqlx_any_vs_native sqlite:///path/to/a/fan-out.db");
    let any = sqlx::pool::PoolOptions::<sqlx::Any>::new().max_connections(1).connect(&url).await.unwrap();
    let native = sqlx::pool::PoolOptions::<sqlx::Sqlite>::new().max_connections(1).connect(&url).await.unwrap();
    sqlx::query("UPDATE engagement_outbox SET status = 'scheduled'").execute(&native).await.unwrap();
    let first: i64 = sqlx::query_scalar("SELECT MIN(due_at) FROM engagement_outbox").fetch_one(&native).await.unwrap();
    for round in 0..3 {
        let (mut read_any, mut read_native, mut update_any, mut update_native) = [Duration::ZERO; 4].into();
        let (mut sends_any, mut sends_native) = (Duration::ZERO, Duration::ZERO);
        for batch in 0..BATCHES {
            let from = first + batch * 5;
            let ((ids, a), (same, n)) = in_turn!(batch, read, any, native, from);
            assert_eq!(ids, same, "both drivers read the same rows");
            assert_eq!(ids.len(), ROWS, "the database holds a fan-out of at least {ROWS} rows a batch");
            (read_any, read_native) = (read_any + a, read_native + n);
            let (a, n) = in_turn!(batch, update, any, native, ids);
            (update_any, update_native) = (update_any + a, update_native + n);
            let (a, n) = in_turn!(batch, append_sends, any, native, ids);
            (sends_any, sends_native) = (sends_any + a, sends_native + n);
        }
        let per = |d: Duration| d / BATCHES as u32;
        println!(
            "round {round}, per {ROWS} rows: read: Any {:?}, native {:?}; fenced update: Any {:?}, native {:?}; \
             send log: Any {:?}, native {:?}",
            per(read_any),
            per(read_native),
            per(update_any),
            per(update_native),
            per(sends_any),
            per(sends_native)
        );
    }
}
