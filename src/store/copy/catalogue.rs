//! What tables and columns a database holds, read from its own catalogue
//! (`sqlite_master` and `pragma_table_info`, `information_schema` on
//! PostgreSQL and MariaDB/MySQL), and the order foreign keys impose.
//!
//! Read rather than listed in the code: a migration that adds a table or a
//! column is copied by the next `herald copy` without anyone remembering
//! this module, and a column the two sides disagree on stops the copy
//! instead of being dropped on the floor (see [`super::CopyError::ColumnsDiffer`]).

use std::collections::{BTreeMap, BTreeSet};

use sqlx::{AnyPool, Row};

use super::CopyError;
use crate::store::Dialect;

/// A column's values as the copy carries them. Every Herald column is
/// `BIGINT` (times in milliseconds, counters) or text (`TEXT`, `VARCHAR`,
/// `MEDIUMTEXT`: ids, JSON, addresses); see the store's module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Text,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
}

/// Herald's tables: every table whose name starts with `engagement_`,
/// bookkeeping included (the caller decides what to do with it).
pub async fn tables(pool: &AnyPool, dialect: Dialect) -> Result<Vec<Table>, CopyError> {
    let list = match dialect {
        Dialect::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'engagement\\_%' ESCAPE '\\' ORDER BY name"
        }
        Dialect::Postgres => {
            "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
             AND table_name LIKE 'engagement\\_%' ORDER BY table_name"
        }
        Dialect::MySql => {
            "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' \
             AND table_name LIKE 'engagement\\\\_%' ORDER BY table_name"
        }
    };
    let mut names: Vec<String> = sqlx::query(list)
        .fetch_all(pool)
        .await
        .map_err(CopyError::db("read the table list"))?
        .iter()
        .map(|r| r.try_get::<String, _>(0))
        .collect::<Result<_, _>>()
        .map_err(CopyError::db("read the table list"))?;
    // By byte order, the same on every side (MariaDB's collation puts
    // `engagement_digests` before `engagement_digest_items`).
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let columns = columns(pool, dialect, &name).await?;
        out.push(Table { name, columns });
    }
    Ok(out)
}

async fn columns(pool: &AnyPool, dialect: Dialect, table: &str) -> Result<Vec<Column>, CopyError> {
    let sql = match dialect {
        Dialect::Sqlite => "SELECT name, type FROM pragma_table_info(?) ORDER BY cid",
        Dialect::Postgres => {
            "SELECT CAST(column_name AS TEXT), CAST(data_type AS TEXT) FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position"
        }
        Dialect::MySql => {
            "SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR) FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position"
        }
    };
    let rows = sqlx::query(sql).bind(table).fetch_all(pool).await.map_err(CopyError::db("read the column list"))?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let name: String = r.try_get(0).map_err(CopyError::db("read the column list"))?;
        let ty: String = r.try_get(1).map_err(CopyError::db("read the column list"))?;
        let lower = ty.to_ascii_lowercase();
        let kind = if lower.contains("int") {
            Kind::Int
        } else if lower.contains("char") || lower.contains("text") {
            Kind::Text
        } else {
            return Err(CopyError::UnknownColumnType { table: table.to_owned(), column: name, ty });
        };
        out.push(Column { name, kind });
    }
    Ok(out)
}

/// `(table, table it references)` for every foreign key among Herald's
/// tables.
pub async fn foreign_keys(pool: &AnyPool, dialect: Dialect) -> Result<Vec<(String, String)>, CopyError> {
    let sql = match dialect {
        Dialect::Sqlite => {
            "SELECT m.name, f.\"table\" FROM sqlite_master m, pragma_foreign_key_list(m.name) f \
             WHERE m.type = 'table' AND m.name LIKE 'engagement%'"
        }
        Dialect::Postgres => {
            "SELECT CAST(CAST(conrelid AS regclass) AS TEXT), CAST(CAST(confrelid AS regclass) AS TEXT) \
             FROM pg_constraint WHERE contype = 'f' AND connamespace = CAST(current_schema() AS regnamespace)"
        }
        Dialect::MySql => {
            "SELECT CAST(table_name AS CHAR), CAST(referenced_table_name AS CHAR) \
             FROM information_schema.referential_constraints WHERE constraint_schema = DATABASE()"
        }
    };
    let rows = sqlx::query(sql).fetch_all(pool).await.map_err(CopyError::db("read the foreign keys"))?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(CopyError::db("read the foreign keys"))
}

/// The tables in an order where every table comes after the tables it
/// references (Kahn's algorithm; ties by name, so the order is stable).
/// Herald's schema has no foreign keys today (rows are written in batches
/// and pruned table by table, see `retention`), so this is alphabetical;
/// a migration that adds one gets a correct copy without a change here.
pub fn in_dependency_order(tables: Vec<Table>, keys: &[(String, String)]) -> Result<Vec<Table>, CopyError> {
    let names: BTreeSet<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    let mut waits_for: BTreeMap<&str, BTreeSet<&str>> = names.iter().map(|n| (*n, BTreeSet::new())).collect();
    for (from, to) in keys {
        if from != to
            && names.contains(to.as_str())
            && let Some(w) = waits_for.get_mut(from.as_str())
        {
            w.insert(to.as_str());
        }
    }
    let mut order: Vec<String> = Vec::with_capacity(tables.len());
    while !waits_for.is_empty() {
        let ready: Vec<&str> = waits_for.iter().filter(|(_, w)| w.is_empty()).map(|(n, _)| *n).collect();
        if ready.is_empty() {
            return Err(CopyError::ForeignKeyCycle { tables: waits_for.keys().map(|s| (*s).to_owned()).collect() });
        }
        for n in ready {
            waits_for.remove(n);
            for w in waits_for.values_mut() {
                w.remove(n);
            }
            order.push(n.to_owned());
        }
    }
    let mut by_name: BTreeMap<String, Table> = tables.into_iter().map(|t| (t.name.clone(), t)).collect();
    Ok(order.into_iter().filter_map(|n| by_name.remove(&n)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> Table {
        Table { name: name.to_owned(), columns: vec![] }
    }

    #[test]
    fn referenced_tables_come_first() {
        let keys = vec![("a".to_owned(), "c".to_owned()), ("c".to_owned(), "b".to_owned())];
        let order = in_dependency_order(vec![t("a"), t("b"), t("c"), t("d")], &keys).unwrap();
        let names: Vec<&str> = order.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["b", "d", "c", "a"]);
    }

    #[test]
    fn a_cycle_is_refused_with_its_tables() {
        let keys = vec![("a".to_owned(), "b".to_owned()), ("b".to_owned(), "a".to_owned())];
        let err = in_dependency_order(vec![t("a"), t("b"), t("c")], &keys).unwrap_err();
        assert!(err.to_string().contains("a, b"), "{err}");
    }
}
