//! `herald copy`: every row of one Herald database into another, empty one,
//! for the day a SQLite file grows into a PostgreSQL or MariaDB server.
//!
//! What it guarantees, and how:
//! - **Every table, every column.** The tables and their columns are read
//!   from the target's catalogue after migrating it (see [`catalogue`]), and
//!   the source must hold the same tables with the same columns and the same
//!   applied migrations; any difference stops the copy before a row moves.
//!   Rejected: a list of tables in this module, which a migration adding a
//!   table or column (other work adds them often) would leave behind
//!   silently.
//! - **All or nothing.** Every row goes in one transaction on the target,
//!   and the counts are compared inside it before the commit: a copy that
//!   fails halfway leaves the target as empty as it found it, so it can
//!   simply be run again.
//! - **Nothing delivered twice.** The target must be empty (a migrated,
//!   untouched database), and the source stopped: a live instance lease on
//!   the source refuses the copy, since rows an instance delivers after they
//!   were copied would be delivered again from the target.
//! - **Positions go on.** Event and inbox positions are copied as they are,
//!   and so are the counters they are taken from (`engagement_sequences`),
//!   so a follower of `GET /v1/events` resumes at the same number.
//! - **Batches.** Rows travel in multi-row `INSERT`s of at most
//!   [`MAX_BATCH_ROWS`] rows and about [`MAX_BATCH_BYTES`] of text
//!   (MariaDB's `max_allowed_packet` is 16 MiB by default; a bound per
//!   statement keeps inbox bodies of up to 256 KiB under it).
//!
//! Rejected: a dump and restore with each server's tools (the previous
//! documented way, kept in docs/operations/sqlite-to-postgres.md): it needs
//! `sqlite3` and `psql` or `mysql` installed, quoting rules per tool, and
//! leaves the counts to the reader.

pub mod catalogue;

use std::collections::BTreeSet;
use std::time::Instant;

use futures::TryStreamExt;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Dialect, SqlStore, Store, StoreError};
use crate::clock::{Clock, SystemClock};
use catalogue::{Kind, Table};

/// Most rows in one `INSERT`. PostgreSQL and MariaDB take 65,535 bound
/// values per statement and SQLite 32,766; the widest table has about 25
/// columns, so 500 rows stay far below both (and below [`max_rows`]).
pub const MAX_BATCH_ROWS: usize = 500;

/// Text bound into one `INSERT`, about; a batch is cut when it passes this.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

/// Migration bookkeeping: written by each side's own `migrate`, compared,
/// never copied.
const BOOKKEEPING: &str = "engagement_schema_migrations";

/// Tables a fresh migration fills with a row or two; on the target they
/// count as empty while every counter is still zero, and their rows are
/// replaced by the source's. A test (`only_the_seeded_tables_hold_rows_after_migrating`
/// in tests/copy.rs) fails when a migration seeds another table.
pub const SEEDED: &[(&str, &str)] = &[("engagement_sequences", "last <> 0")];

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("copy: {op}: {source}")]
    Database {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("copy: {0}")]
    Store(#[from] StoreError),
    #[error("copy: the source and the target are the same database ({url}); name another with --to")]
    SameDatabase { url: String },
    #[error(
        "copy: the target is not empty: {table} holds {rows} row(s); copy only into a new database \
         (created and left untouched; `herald copy` migrates it), or drop and recreate this one"
    )]
    TargetNotEmpty { table: String, rows: i64 },
    #[error(
        "copy: an instance is still running on the source ({instance}, lease valid for another {seconds}s); \
         stop every `herald serve` on it first, or rows it delivers after the copy would be delivered again"
    )]
    SourceInUse { instance: String, seconds: i64 },
    #[error(
        "copy: the source has migrations {source_versions:?} applied and the target {target_versions:?}; \
         run `herald migrate` on the source with this Herald first"
    )]
    SchemaVersions { source_versions: Vec<i64>, target_versions: Vec<i64> },
    #[error("copy: table {table} is in the target but not in the source; run `herald migrate` on the source first")]
    MissingTable { table: String },
    #[error(
        "copy: table {table} is in the source but not in the target; it would be left behind. \
         Migrate the target with the Herald that made the source"
    )]
    ExtraTable { table: String },
    #[error(
        "copy: the columns of {table} differ: only in the source {only_source:?}, only in the target {only_target:?}; \
         migrate both with the same Herald"
    )]
    ColumnsDiffer { table: String, only_source: Vec<String>, only_target: Vec<String> },
    #[error("copy: column {table}.{column} has type {ty}, which the copy does not know (it carries integers and text)")]
    UnknownColumnType { table: String, column: String, ty: String },
    #[error("copy: foreign keys form a cycle between {}; the copy cannot order these tables", tables.join(", "))]
    ForeignKeyCycle { tables: Vec<String> },
    #[error("copy: {table}: the source holds {source_rows} row(s) but the target {target_rows}; nothing was committed")]
    CountMismatch { table: String, source_rows: i64, target_rows: i64 },
}

impl CopyError {
    fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> CopyError {
        move |source| CopyError::Database { op, source }
    }
}

/// One table's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableCopied {
    pub table: String,
    pub rows: i64,
    pub batches: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CopyReport {
    pub tables: Vec<TableCopied>,
    pub rows: i64,
    pub seconds: f64,
}

/// Copies every row of `source` into `target`. The target is migrated
/// first; see the module docs for what is refused. `progress` is called
/// once per table as it is copied, before the commit.
pub async fn copy(
    source: &SqlStore,
    target: &SqlStore,
    mut progress: impl FnMut(&TableCopied),
) -> Result<CopyReport, CopyError> {
    let started = Instant::now();
    if source.url() == target.url() {
        return Err(CopyError::SameDatabase { url: crate::config::redact_url_password(target.url()) });
    }
    refuse_live_instances(source).await?;
    target.migrate().await?;
    compare_versions(source, target).await?;

    let target_tables = catalogue::tables(target.pool(), target.dialect()).await?;
    let source_tables = catalogue::tables(source.pool(), source.dialect()).await?;
    compare_tables(&source_tables, &target_tables)?;
    let keys = catalogue::foreign_keys(target.pool(), target.dialect()).await?;
    let tables: Vec<Table> = target_tables.into_iter().filter(|t| t.name != BOOKKEEPING).collect();
    let tables = catalogue::in_dependency_order(tables, &keys)?;
    refuse_non_empty(target, &tables).await?;

    let mut tx = target.begin_write().await.map_err(CopyError::db("begin the target's transaction"))?;
    let mut report = Vec::with_capacity(tables.len());
    for table in &tables {
        if let Some((_, _)) = SEEDED.iter().find(|(t, _)| *t == table.name) {
            // `herald copy` walks every table the catalogue lists: the table is the variable.
            sqlx::query(&format!("DELETE FROM {}", table.name))
                .execute(&mut *tx)
                .await
                .map_err(CopyError::db("clear a seeded table"))?;
        }
        let copied = copy_table(source, target.dialect(), &mut tx, table).await?;
        let source_rows = count(source.pool(), &table.name).await?;
        let target_rows = count(&mut *tx, &table.name).await?;
        if source_rows != target_rows || copied.rows != source_rows {
            return Err(CopyError::CountMismatch { table: table.name.clone(), source_rows, target_rows });
        }
        progress(&copied);
        report.push(copied);
    }
    tx.commit().await.map_err(CopyError::db("commit the copy"))?;
    let rows = report.iter().map(|t| t.rows).sum();
    Ok(CopyReport { tables: report, rows, seconds: started.elapsed().as_secs_f64() })
}

async fn count<'e>(exec: impl sqlx::Executor<'e, Database = sqlx::Any>, table: &str) -> Result<i64, CopyError> {
    // The table is the variable (see `copy`).
    sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(exec)
        .await
        .and_then(|r| r.try_get::<i64, _>(0))
        .map_err(CopyError::db("count rows"))
}

async fn refuse_live_instances(source: &SqlStore) -> Result<(), CopyError> {
    let has_table =
        catalogue::tables(source.pool(), source.dialect()).await?.iter().any(|t| t.name == "engagement_instances");
    if !has_table {
        return Ok(());
    }
    let now = SystemClock.now().0;
    let q = source.dialect().sql("SELECT id, expires_at FROM engagement_instances WHERE expires_at >= ? ORDER BY id");
    let live = sqlx::query(&q)
        .bind(now)
        .fetch_optional(source.pool())
        .await
        .map_err(CopyError::db("read the source's instance leases"))?;
    match live {
        None => Ok(()),
        Some(r) => {
            let instance: String = r.try_get(0).map_err(CopyError::db("read the source's instance leases"))?;
            let expires: i64 = r.try_get(1).map_err(CopyError::db("read the source's instance leases"))?;
            Err(CopyError::SourceInUse {
                instance,
                seconds: (expires - now).max(0).unsigned_abs().div_ceil(1000) as i64,
            })
        }
    }
}

async fn versions(store: &SqlStore) -> Result<Vec<i64>, CopyError> {
    let rows = sqlx::query("SELECT version FROM engagement_schema_migrations ORDER BY version")
        .fetch_all(store.pool())
        .await
        .map_err(CopyError::db("read the applied migrations"))?;
    rows.iter().map(|r| r.try_get::<i64, _>(0)).collect::<Result<_, _>>().map_err(CopyError::db("read migrations"))
}

async fn compare_versions(source: &SqlStore, target: &SqlStore) -> Result<(), CopyError> {
    let (source_versions, target_versions) = (versions(source).await?, versions(target).await?);
    if source_versions != target_versions {
        return Err(CopyError::SchemaVersions { source_versions, target_versions });
    }
    Ok(())
}

fn compare_tables(source: &[Table], target: &[Table]) -> Result<(), CopyError> {
    for t in target {
        let Some(s) = source.iter().find(|s| s.name == t.name) else {
            return Err(CopyError::MissingTable { table: t.name.clone() });
        };
        let names = |t: &Table| t.columns.iter().map(|c| c.name.clone()).collect::<BTreeSet<_>>();
        let (sn, tn) = (names(s), names(t));
        if sn != tn {
            return Err(CopyError::ColumnsDiffer {
                table: t.name.clone(),
                only_source: sn.difference(&tn).cloned().collect(),
                only_target: tn.difference(&sn).cloned().collect(),
            });
        }
    }
    if let Some(s) = source.iter().find(|s| !target.iter().any(|t| t.name == s.name)) {
        return Err(CopyError::ExtraTable { table: s.name.clone() });
    }
    Ok(())
}

async fn refuse_non_empty(target: &SqlStore, tables: &[Table]) -> Result<(), CopyError> {
    for t in tables {
        // The table is the variable (see `copy`).
        let sql = match SEEDED.iter().find(|(name, _)| *name == t.name) {
            Some((_, used)) => format!("SELECT COUNT(*) FROM {} WHERE {used}", t.name),
            None => format!("SELECT COUNT(*) FROM {}", t.name),
        };
        let rows: i64 = sqlx::query(&sql)
            .fetch_one(target.pool())
            .await
            .and_then(|r| r.try_get(0))
            .map_err(CopyError::db("count the target's rows"))?;
        if rows > 0 {
            return Err(CopyError::TargetNotEmpty { table: t.name.clone(), rows });
        }
    }
    Ok(())
}

/// One value as read from the source.
enum Value {
    Int(Option<i64>),
    Text(Option<String>),
}

/// Rows per `INSERT` for a table this wide: below every backend's limit
/// on bound values (SQLite's 32,766 is the lowest).
fn max_rows(columns: usize) -> usize {
    MAX_BATCH_ROWS.min(30_000 / columns.max(1))
}

async fn copy_table(
    source: &SqlStore,
    target_dialect: Dialect,
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    table: &Table,
) -> Result<TableCopied, CopyError> {
    let cols: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
    // The table and its columns are the variables (see `copy`).
    let select = format!("SELECT {} FROM {}", cols.join(", "), table.name);
    let limit = max_rows(cols.len());
    let mut rows = sqlx::query(&select).fetch(source.pool());
    let mut batch: Vec<Vec<Value>> = Vec::with_capacity(limit);
    let (mut bytes, mut total, mut batches) = (0usize, 0i64, 0usize);
    while let Some(row) = rows.try_next().await.map_err(CopyError::db("read the source's rows"))? {
        let values = read_row(&row, table)?;
        bytes += values.iter().map(|v| if let Value::Text(Some(s)) = v { s.len() } else { 8 }).sum::<usize>();
        batch.push(values);
        if batch.len() >= limit || bytes >= MAX_BATCH_BYTES {
            insert(tx, target_dialect, table, &batch).await?;
            total += batch.len() as i64;
            batches += 1;
            batch.clear();
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        insert(tx, target_dialect, table, &batch).await?;
        total += batch.len() as i64;
        batches += 1;
    }
    Ok(TableCopied { table: table.name.clone(), rows: total, batches })
}

fn read_row(row: &AnyRow, table: &Table) -> Result<Vec<Value>, CopyError> {
    table
        .columns
        .iter()
        .map(|c| match c.kind {
            Kind::Int => row.try_get::<Option<i64>, _>(c.name.as_str()).map(Value::Int),
            // MySQL's binary-collated text arrives as bytes (see `rows`).
            Kind::Text => super::rows::opt_text(row, &c.name).map(Value::Text),
        })
        .collect::<Result<_, _>>()
        .map_err(CopyError::db("decode a source row"))
}

async fn insert(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    dialect: Dialect,
    table: &Table,
    batch: &[Vec<Value>],
) -> Result<(), CopyError> {
    let cols: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
    // The table, its columns and the batch's length are the variables (see `copy`).
    let one = format!("({})", vec!["?"; cols.len()].join(", "));
    let sql = format!("INSERT INTO {} ({}) VALUES {}", table.name, cols.join(", "), vec![one; batch.len()].join(", "));
    let sql = dialect.sql(&sql);
    // A full batch's text repeats, so it is prepared once per table; the
    // last, shorter one is not kept.
    let mut q = sqlx::query(&sql).persistent(batch.len() == max_rows(cols.len()));
    for row in batch {
        for v in row {
            q = match v {
                Value::Int(i) => q.bind(*i),
                Value::Text(s) => q.bind(s.clone()),
            };
        }
    }
    q.execute(&mut **tx).await.map_err(CopyError::db("insert rows into the target"))?;
    Ok(())
}
