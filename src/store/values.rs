//! Many rows as a multi-row `VALUES` list: how MySQL's and SQLite's
//! delivery-path inserts take a batch.
//!
//! Everywhere else a batch travels as one JSON parameter (see
//! `json_rows`). For the flush's inserts (events, the send log, inbox
//! messages) that cost more than the writes themselves on two of the three
//! databases: in a MariaDB drain of 50,000 rows the three inserts took 6.6 s
//! of server time through `JSON_TABLE` and 1.9 s as multi-row `VALUES`
//! (slow log, `long_query_time = 0`), and SQLite's drain of 100,000 rows
//! went from a median of 19,700 to 24,200 rows/s (SQLite reads each
//! column with `->>`, parsing the row's JSON again for every column).
//! PostgreSQL parses the array once as `jsonb` and measured the same either
//! way (medians 25,700 and 26,100 rows/s), so it keeps the one statement.
//! The outbox's own insert (planning, enqueue) does the same: MariaDB's
//! enqueue medians went from 30,000 to 35,400 rows/s, SQLite's stayed at
//! about 60,000.
//!
//! The named statements (`*_values` in `queries/`) hold one row's tuple
//! followed by [`EACH_ROW`]; [`statement`] repeats the tuple once per row of
//! a run. Rejected: writing every length out in the `.sql` files (nine texts
//! per table) or building the list from column names in Rust (the text a
//! reader could paste into `EXPLAIN` would then be nowhere).
//!
//! A `VALUES` list's text changes with its length, and each text is a new
//! prepared statement, so a batch is cut into runs whose lengths come from
//! a fixed ladder (powers of two up to [`MAX_ROWS`]): at most nine texts per
//! table, each prepared once per connection, and at most
//! `len / MAX_ROWS + log2(MAX_ROWS) + 1` statements per batch on MySQL. On
//! SQLite a run is padded up to its ladder length instead (see [`runs`]):
//! `ceil(len / MAX_ROWS)` statements per batch, from the same texts.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use super::json_rows::to_json;
use super::queries::Query;
use super::{Dialect, StoreError};
use crate::clock::Millis;

/// A statement being built, before its values are bound.
pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// A row a batch insert writes: declared with `json_rows::row_as_array`,
/// which serialises its fields as one JSON array (PostgreSQL) and binds
/// them, in the same order, as one tuple of a `VALUES` list (here).
pub(crate) trait BindFields {
    /// How many fields the row has: the values one tuple binds before the
    /// statement's own per-row timestamps (see [`insert`]).
    const FIELDS: usize;

    /// Binds the fields, in declaration order.
    fn bind_fields<'q>(self, query: AnyQuery<'q>) -> AnyQuery<'q>
    where
        Self: 'q;
}

/// Most rows one JSON parameter carries: keeps it to a few megabytes at
/// most (MySQL's packet limit is 16 MiB by default).
pub(crate) const CHUNK: usize = 1000;

/// Writes `rows` on the caller's connection and returns what the statements
/// returned (the ids an insert that skips existing keys wrote, where it
/// says them). PostgreSQL: `json` once per [`CHUNK`] rows, binding the rows
/// as one JSON parameter and then `now`. SQLite and MySQL: `values` once per
/// [`runs`] run, binding each row's fields and then, for each bind the
/// statement names after them (`created_at`, `updated_at`), `now`.
pub(crate) async fn insert<R>(
    conn: &mut AnyConnection,
    d: Dialect,
    (json, values): (Query, Query),
    rows: Vec<R>,
    now: Millis,
    op: &'static str,
) -> Result<Vec<AnyRow>, StoreError>
where
    R: BindFields + serde::Serialize,
{
    if inserts_as_values(d) {
        return insert_values(conn, d, values, rows, now, op).await;
    }
    let mut returned = Vec::new();
    for chunk in rows.chunks(CHUNK) {
        let query = sqlx::query(json.sql(d)).bind(to_json(chunk)?).bind(now.0);
        returned.extend(query.fetch_all(&mut *conn).await.map_err(StoreError::db(op))?);
    }
    Ok(returned)
}

/// [`insert`]'s `VALUES` path alone, for a table whose PostgreSQL rows are
/// written some other way (the inbox's, by `append_events_and_inbox`).
pub(crate) async fn insert_values<R>(
    conn: &mut AnyConnection,
    d: Dialect,
    values: Query,
    rows: Vec<R>,
    now: Millis,
    op: &'static str,
) -> Result<Vec<AnyRow>, StoreError>
where
    R: BindFields,
{
    assert!(inserts_as_values(d), "{}: {d} inserts rows as one JSON parameter", values.name());
    let mut returned = Vec::new();
    let stamps = &values.binds(d)[R::FIELDS..];
    assert!(
        stamps.iter().all(|b| matches!(*b, "created_at" | "updated_at")),
        "{}: the binds after a row's fields are its timestamps, not {stamps:?}",
        values.name()
    );
    // The runs' lengths only: the rows themselves are moved into the binds.
    let lengths = vec![(); rows.len()];
    let mut rows = rows.into_iter();
    for run in runs(d, &lengths) {
        let mut query = sqlx::query(statement(values, d, &run));
        for row in rows.by_ref().take(run.rows.len()) {
            query = row.bind_fields(query);
            for _ in stamps {
                query = query.bind(now.0);
            }
        }
        let query = bind_padding(query, values.binds(d).len(), &run);
        returned.extend(query.fetch_all(&mut *conn).await.map_err(StoreError::db(op))?);
    }
    Ok(returned)
}

/// The marker after a `VALUES` statement's one-row tuple: [`statement`]
/// repeats that tuple once per row.
pub(crate) const EACH_ROW: &str = "/* each row */";

/// Whether this dialect's delivery-path inserts bind every value (MySQL,
/// SQLite) rather than one JSON array (PostgreSQL, see `json_rows`).
pub(crate) fn inserts_as_values(d: Dialect) -> bool {
    d != Dialect::Postgres
}

/// Most rows one statement takes: 256 rows of twelve columns is 3,072
/// parameters, far below MySQL's 65,535 and SQLite's 32,766, and each
/// statement is a few hundred kilobytes at most.
pub(crate) const MAX_ROWS: usize = 256;

/// Cuts `rows` into runs of [`MAX_ROWS`] and then of decreasing powers of
/// two, so every run's length is one of a fixed few.
pub(crate) fn ladder<T>(mut rows: &[T]) -> Vec<&[T]> {
    let mut runs = Vec::new();
    while !rows.is_empty() {
        let n = if rows.len() >= MAX_ROWS { MAX_ROWS } else { 1 << rows.len().ilog2() };
        let (run, rest) = rows.split_at(n);
        runs.push(run);
        rows = rest;
    }
    runs
}

/// One statement's worth of rows: `rows`, then `padding` rows of NULLs
/// that the statement drops (see [`runs`]).
pub(crate) struct Run<'a, T> {
    pub rows: &'a [T],
    pub padding: usize,
}

/// How a batch is cut into statements. MySQL: the [`ladder`]'s exact runs.
/// SQLite: runs of up to [`MAX_ROWS`], each padded up to the next ladder
/// length with rows of NULLs that [`source`]'s `WHERE` drops, so a flush
/// of 30 rows is one statement of 32 instead of four (16, 8, 4, 2). Each
/// statement is a round trip between the runtime and the connection's
/// thread, and on SQLite the one writer waits through every one of them:
/// 37 µs a wake-up on average for that thread alone under the pipeline
/// bench (`perf sched timehist`). Padding costs only NULL bindings and keeps
/// the same few statement texts. MySQL's `VALUES` cannot be filtered
/// without a derived table, whose columns MariaDB names after the first
/// row's values (and `AS t (a, b)` is a syntax error in MariaDB 10.11), so
/// it keeps the exact runs.
pub(crate) fn runs<T>(d: Dialect, rows: &[T]) -> Vec<Run<'_, T>> {
    if d != Dialect::Sqlite {
        return ladder(rows).into_iter().map(|rows| Run { rows, padding: 0 }).collect();
    }
    rows.chunks(MAX_ROWS).map(|rows| Run { rows, padding: rows.len().next_power_of_two() - rows.len() }).collect()
}

/// `query`'s text for `run` (its rows and its padding): the tuple before
/// [`EACH_ROW`] once per row. Each text is made once per process and kept:
/// a run's length is one of the ladder's nine, so a statement has at most
/// nine texts, and a flush builds none.
pub(crate) fn statement<T>(query: Query, d: Dialect, run: &Run<'_, T>) -> &'static str {
    /// Texts by statement, dialect and row count.
    type Texts = HashMap<(Query, Dialect, usize), &'static str>;
    static TEXTS: LazyLock<Mutex<Texts>> = LazyLock::new(Mutex::default);
    let rows = run.rows.len() + run.padding;
    let mut texts = TEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    texts.entry((query, d, rows)).or_insert_with(|| Box::leak(query.sql_for_rows(d, rows).into_boxed_str()))
}

/// `sql` with the tuple before [`EACH_ROW`] repeated `rows` times.
pub(super) fn repeat_row(sql: &str, rows: usize) -> String {
    let (head, tail) = sql.split_once(EACH_ROW).expect("a VALUES statement marks its row tuple");
    let head = head.trim_end();
    let (prefix, row) = head.split_at(head.rfind('(').expect("the row tuple precedes its marker"));
    [prefix, &vec![row; rows].join(", "), tail].concat()
}

/// Binds the NULLs of `run`'s padding rows.
pub(crate) fn bind_padding<'q, T>(mut query: AnyQuery<'q>, columns: usize, run: &Run<'_, T>) -> AnyQuery<'q> {
    for _ in 0..columns * run.padding {
        query = query.bind(None::<&str>);
    }
    query
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_cut_into_lengths_from_a_fixed_ladder() {
        let rows: Vec<u32> = (0..830).collect();
        let runs = ladder(&rows);
        let lens: Vec<usize> = runs.iter().map(|r| r.len()).collect();
        assert_eq!(lens, [256, 256, 256, 32, 16, 8, 4, 2]);
        // In order, nothing lost or repeated.
        assert_eq!(runs.concat(), rows);
        assert!(ladder::<u32>(&[]).is_empty());
        assert_eq!(ladder(&[7]).concat(), [7]);
        // Every length any batch can produce is a power of two up to MAX_ROWS.
        for n in 1..=2 * MAX_ROWS + 1 {
            let rows = vec![0u8; n];
            for run in ladder(&rows) {
                assert!(run.len().is_power_of_two() && run.len() <= MAX_ROWS, "{n}: {}", run.len());
            }
        }
    }

    #[test]
    fn sqlite_pads_each_run_to_a_ladder_length_and_mysql_keeps_exact_runs() {
        let rows: Vec<u32> = (0..600).collect();
        let sqlite: Vec<(usize, usize)> =
            runs(Dialect::Sqlite, &rows).iter().map(|r| (r.rows.len(), r.padding)).collect();
        assert_eq!(sqlite, [(256, 0), (256, 0), (88, 40)]);
        let thirty = vec![0u8; 30];
        let one = runs(Dialect::Sqlite, &thirty);
        assert_eq!((one.len(), one[0].padding), (1, 2), "30 rows are one statement of 32");
        let mysql: Vec<(usize, usize)> =
            runs(Dialect::MySql, &thirty).iter().map(|r| (r.rows.len(), r.padding)).collect();
        assert_eq!(mysql, [(16, 0), (8, 0), (4, 0), (2, 0)]);
        assert_eq!(runs(Dialect::Sqlite, &rows).iter().map(|r| r.rows).collect::<Vec<_>>().concat(), rows);
        assert!(runs::<u8>(Dialect::Sqlite, &[]).is_empty());
    }

    /// The padding rows are written nowhere, and the real rows are written
    /// as given, with `ON CONFLICT` and `RETURNING` as the flush uses them.
    #[tokio::test]
    async fn sqlite_drops_the_padding_rows() {
        sqlx::any::install_default_drivers();
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER)").execute(&mut conn).await.unwrap();
        sqlx::query("INSERT INTO t VALUES ('b', 0)").execute(&mut conn).await.unwrap();
        let rows = [("a", 1_i64), ("b", 2), ("c", 3)];
        let run = &runs(Dialect::Sqlite, &rows)[0];
        assert_eq!(run.padding, 1);
        let one_row = format!(
            "INSERT INTO t (id, n) SELECT * FROM (VALUES (?, ?) {EACH_ROW}) WHERE column1 IS NOT NULL \
             ON CONFLICT (id) DO NOTHING RETURNING id"
        );
        let sql = repeat_row(&one_row, run.rows.len() + run.padding);
        let mut query = sqlx::query(&sql);
        for (id, n) in run.rows {
            query = query.bind(*id).bind(*n);
        }
        let returned = bind_padding(query, 2, run).fetch_all(&mut conn).await.unwrap();
        let mut ids: Vec<String> = returned.iter().map(|r| sqlx::Row::get(r, 0)).collect();
        ids.sort();
        assert_eq!(ids, ["a", "c"]);
        let all: Vec<(String, i64)> =
            sqlx::query_as("SELECT id, n FROM t ORDER BY id").fetch_all(&mut conn).await.unwrap();
        assert_eq!(all, [("a".into(), 1), ("b".into(), 0), ("c".into(), 3)]);
    }

    #[test]
    fn the_marked_tuple_repeats_once_per_row() {
        let sql = format!("INSERT INTO t (a, b) VALUES (?, 'x', ?) {EACH_ROW} ON CONFLICT DO NOTHING");
        assert_eq!(repeat_row(&sql, 1), "INSERT INTO t (a, b) VALUES (?, 'x', ?) ON CONFLICT DO NOTHING");
        assert_eq!(
            repeat_row(&sql, 3),
            "INSERT INTO t (a, b) VALUES (?, 'x', ?), (?, 'x', ?), (?, 'x', ?) ON CONFLICT DO NOTHING"
        );
    }
}
