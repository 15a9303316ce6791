//! How much sqlx's `Any` driver costs Herald's two hottest SQLite
//! statements against the native `sqlx::Sqlite` driver: the direct lane's
//! read of 1,000 due rows (`peek_channel`) and the outcome flush's fenced
//! update of 1,000 rows (`record_unclaimed_values`), each statement as in
//! `src/store/queries/sqlite/`. The update runs in a transaction that is
//! rolled back, so every round finds the same rows. See
//! docs/performance.md ("One trigger to many") for the figures.
//!
//!   herald bench --fanout --subscribers 200000 --bench-database-url sqlite:///tmp/fan.db
//!   cargo run --release -- sqlite:///tmp/fan.db     # sets every row back to 'scheduled' first
use sqlx::Row;
use std::time::Instant;

const READ: &str = "SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status, \
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at \
  FROM engagement_outbox INDEXED BY engagement_outbox_due_channel \
 WHERE status = 'scheduled' AND channel = ? AND due_at >= ? AND due_at <= ? \
   AND id NOT IN (SELECT value FROM json_each(?)) ORDER BY due_at LIMIT ?";

fn update_sql(n: usize) -> String {
    let tuples = vec!["(?, ?, ?, ?, ?, ?, ?)"; n].join(", ");
    format!(
        "WITH c (id, version, status, last_error, due_at, add_attempt, expires_at) AS (VALUES {tuples}) \
UPDATE engagement_outbox AS o SET status = c.status, last_error = c.last_error, due_at = COALESCE(c.due_at, o.due_at), \
expires_at = COALESCE(c.expires_at, o.expires_at), claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, \
claim_token = NULL, attempts = o.attempts + c.add_attempt, updated_at = ? FROM c \
WHERE o.id = c.id AND o.updated_at = c.version AND +o.status = 'scheduled' RETURNING id"
    )
}

macro_rules! run {
    ($pool:expr, $rows:expr, $sql:expr) => {{
        let mut tx = $pool.begin().await.unwrap();
        let mut q = sqlx::query($sql);
        for (id, v) in $rows.iter() {
            q = q
                .bind(id.clone())
                .bind(*v)
                .bind("sent")
                .bind(None::<String>)
                .bind(None::<i64>)
                .bind(1_i64)
                .bind(None::<i64>);
        }
        let t = Instant::now();
        let won = q.bind(5_i64).fetch_all(&mut *tx).await.unwrap();
        let e = t.elapsed();
        assert_eq!(won.len(), $rows.len());
        tx.rollback().await.unwrap();
        e
    }};
}

#[tokio::main]
async fn main() {
    sqlx::any::install_default_drivers();
    let url = std::env::args().nth(1).unwrap();
    let any = sqlx::pool::PoolOptions::<sqlx::Any>::new().max_connections(1).connect(&url).await.unwrap();
    let native = sqlx::pool::PoolOptions::<sqlx::Sqlite>::new().max_connections(1).connect(&url).await.unwrap();
    sqlx::query("UPDATE engagement_outbox SET status = 'scheduled'").execute(&native).await.unwrap();
    let first: i64 = sqlx::query_scalar("SELECT MIN(due_at) FROM engagement_outbox").fetch_one(&native).await.unwrap();
    let starts: Vec<i64> = (0..20).map(|i| first + i * 5).collect();
    let sql = update_sql(1000);
    for round in 0..3 {
        let (mut ra, mut rn, mut ua, mut un) = (0u128, 0u128, 0u128, 0u128);
        for s in &starts {
            let t = Instant::now();
            let rows = sqlx::query(READ)
                .bind("inbox")
                .bind(*s)
                .bind(i64::MAX)
                .bind("[]")
                .bind(1000_i64)
                .fetch_all(&any)
                .await
                .unwrap();
            let ids: Vec<(String, i64)> =
                rows.iter().map(|r| (r.try_get::<String, _>(0).unwrap(), r.try_get::<i64, _>(15).unwrap())).collect();
            ra += t.elapsed().as_micros();
            let t = Instant::now();
            let rows = sqlx::query(READ)
                .bind("inbox")
                .bind(*s)
                .bind(i64::MAX)
                .bind("[]")
                .bind(1000_i64)
                .fetch_all(&native)
                .await
                .unwrap();
            let _ids2: Vec<(String, i64)> =
                rows.iter().map(|r| (r.try_get::<String, _>(0).unwrap(), r.try_get::<i64, _>(15).unwrap())).collect();
            rn += t.elapsed().as_micros();
            ua += run!(any, ids, &sql).as_micros();
            un += run!(native, ids, &sql).as_micros();
        }
        let k = starts.len() as u128;
        println!(
            "round {round}: read 1,000: Any {} us, native {} us; fenced update of 1,000: Any {} us, native {} us",
            ra / k,
            rn / k,
            ua / k,
            un / k
        );
    }
}
