//! Versioned schema migrations, one SQL file per version per dialect.
//!
//! Not `sqlx::migrate!`: its bookkeeping table is `_sqlx_migrations`, a name
//! Herald cannot change, and Herald is meant to live inside a host
//! application's own database, which may well use sqlx migrations of its own.
//! Herald's bookkeeping lives in `engagement_schema_migrations` beside its
//! other tables. The runner is small: take a lock so two instances starting
//! together do not both migrate, apply what is missing in order, record it.

use serde::Serialize;
use sqlx::{AnyConnection, Connection, Row};

use super::rows::{Fetch, Run};
use super::{Dialect, StoreError};
use crate::clock::Millis;

struct Migration {
    version: i64,
    name: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
    mysql: &'static str,
}

macro_rules! migration {
    ($version:expr, $name:literal, $file:literal) => {
        Migration {
            version: $version,
            name: $name,
            sqlite: include_str!(concat!("../../migrations/sqlite/", $file)),
            postgres: include_str!(concat!("../../migrations/postgres/", $file)),
            mysql: include_str!(concat!("../../migrations/mysql/", $file)),
        }
    };
}

const MIGRATIONS: &[Migration] = &[
    migration!(1, "outbox", "0001_outbox.sql"),
    migration!(2, "rules", "0002_rules.sql"),
    migration!(3, "suppressions", "0003_suppressions.sql"),
    migration!(4, "webhooks", "0004_webhooks.sql"),
    migration!(5, "inbox_api", "0005_inbox_api.sql"),
    migration!(6, "events", "0006_events.sql"),
    migration!(7, "bounces", "0007_bounces.sql"),
    migration!(8, "webhook_tokens", "0008_webhook_tokens.sql"),
    migration!(9, "operators", "0009_operators.sql"),
    migration!(10, "engine", "0010_engine.sql"),
    migration!(11, "workflows", "0011_workflows.sql"),
    migration!(12, "instances", "0012_instances.sql"),
    migration!(13, "retention", "0013_retention.sql"),
    migration!(14, "workflow_retention", "0014_workflow_retention.sql"),
    migration!(15, "follow_up_at", "0015_follow_up_at.sql"),
    migration!(16, "outbox_partial_indexes", "0016_outbox_partial_indexes.sql"),
    migration!(17, "erased_users", "0017_erased_users.sql"),
    migration!(18, "push_devices", "0018_push_devices.sql"),
    migration!(19, "recipient_phone_slack", "0019_recipient_phone_slack.sql"),
    migration!(20, "provider_ids", "0020_provider_ids.sql"),
    migration!(21, "delivery_reports", "0021_delivery_reports.sql"),
    migration!(22, "topics_and_fan_out", "0022_topics_and_fan_out.sql"),
    migration!(23, "byte_order_keys", "0023_byte_order_keys.sql"),
];

#[derive(Debug, Clone, Serialize)]
pub struct AppliedMigration {
    pub version: i64,
    pub name: &'static str,
}

impl Migration {
    fn text(&self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
            Dialect::MySql => self.mysql,
        }
    }

    /// Statements end with `;` at the end of a line. MySQL's protocol takes
    /// one statement per query, so every dialect gets them one at a time.
    fn statements(&self, dialect: Dialect) -> Vec<String> {
        let mut out = Vec::new();
        let mut current = String::new();
        for line in self.text(dialect).lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("--") || trimmed.is_empty() {
                continue;
            }
            current.push_str(line);
            current.push('\n');
            if trimmed.ends_with(';') {
                let stmt = current.trim().trim_end_matches(';').to_owned();
                out.push(stmt);
                current.clear();
            }
        }
        if !current.trim().is_empty() {
            out.push(current.trim().to_owned());
        }
        out
    }
}

const BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS engagement_schema_migrations (\
     version BIGINT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at BIGINT NOT NULL)";

/// Applies every missing migration up to `through` (every one with
/// `None`); returns the ones it applied.
pub(super) async fn run(
    conn: &mut AnyConnection,
    dialect: Dialect,
    now: Millis,
    through: Option<i64>,
) -> Result<Vec<AppliedMigration>, StoreError> {
    // Each dialect's lock: (take, release). SQLite's DDL is transactional and
    // its write lock is the whole database, so one IMMEDIATE transaction is
    // both the lock and the unit of work.
    let (lock, unlock) = match dialect {
        Dialect::Sqlite => ("BEGIN IMMEDIATE", "COMMIT"),
        // 1751478892 = "herl"; an arbitrary key that other applications
        // sharing the database are unlikely to pick.
        Dialect::Postgres => (
            "SELECT 1 FROM (SELECT pg_advisory_lock(1751478892)) AS l",
            "SELECT 1 FROM (SELECT pg_advisory_unlock(1751478892)) AS l",
        ),
        Dialect::MySql => ("SELECT GET_LOCK('herald_migrate', 300)", "SELECT RELEASE_LOCK('herald_migrate')"),
    };
    sqlx::query(lock).run(&mut *conn, "migrate: lock").await?;
    let result = apply_pending(conn, dialect, now, through).await;
    let unlock = if dialect == Dialect::Sqlite && result.is_err() { "ROLLBACK" } else { unlock };
    sqlx::query(unlock).run(&mut *conn, "migrate: unlock").await?;
    result
}

async fn apply_pending(
    conn: &mut AnyConnection,
    dialect: Dialect,
    now: Millis,
    through: Option<i64>,
) -> Result<Vec<AppliedMigration>, StoreError> {
    sqlx::query(BOOKKEEPING).run(&mut *conn, "migrate: create engagement_schema_migrations").await?;
    let rows = sqlx::query("SELECT version FROM engagement_schema_migrations")
        .all(&mut *conn, "migrate: read applied versions")
        .await?;
    let mut applied = Vec::with_capacity(rows.len());
    for row in rows {
        applied.push(row.try_get::<i64, _>(0).map_err(StoreError::db("migrate: read applied versions"))?);
    }
    let newest_known = MIGRATIONS.last().map_or(0, |m| m.version);
    if let Some(&v) = applied.iter().find(|&&v| v > newest_known) {
        return Err(StoreError::UnknownMigration { version: v });
    }

    let mut done = Vec::new();
    let wanted = |m: &&Migration| !applied.contains(&m.version) && through.is_none_or(|t| m.version <= t);
    for m in MIGRATIONS.iter().filter(wanted) {
        let failed = |source| StoreError::Migration { version: m.version, name: m.name, source };
        let record =
            dialect.sql("INSERT INTO engagement_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)");
        if dialect == Dialect::Postgres {
            // Transactional DDL: a failed migration leaves nothing behind.
            let mut tx = conn.begin().await.map_err(failed)?;
            apply_one(&mut tx, m, dialect, &record, now).await.map_err(failed)?;
            tx.commit().await.map_err(failed)?;
        } else {
            // SQLite: already inside the lock's transaction. MySQL commits
            // each DDL statement on its own, so a migration that fails
            // halfway has to be finished by hand; the error names it.
            apply_one(conn, m, dialect, &record, now).await.map_err(failed)?;
        }
        done.push(AppliedMigration { version: m.version, name: m.name });
    }
    Ok(done)
}

async fn apply_one(
    conn: &mut AnyConnection,
    m: &Migration,
    dialect: Dialect,
    record: &str,
    now: Millis,
) -> Result<(), sqlx::Error> {
    for stmt in m.statements(dialect) {
        sqlx::query(&stmt).execute(&mut *conn).await?;
    }
    sqlx::query(record).bind(m.version).bind(m.name).bind(now.0).execute(&mut *conn).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_split_into_single_statements() {
        for m in MIGRATIONS {
            for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
                let stmts = m.statements(d);
                assert!(!stmts.is_empty(), "{} {d}", m.name);
                assert!(stmts.iter().all(|s| !s.trim_end().ends_with(';')));
            }
        }
    }
}
