//! Many rows, or many keys, as one JSON parameter that each dialect reads as
//! a table.
//!
//! Set-based writes need a statement that takes N rows. The alternatives
//! were a multi-row `VALUES (?, ?, …), (…)` list (its text changes with N, so
//! every batch size is a new prepared statement, and SQLite caps the number
//! of parameters) and array parameters (`unnest($1::text[])`: PostgreSQL
//! only, and sqlx's `Any` driver cannot bind arrays). One JSON parameter
//! works in all three dialects through `Any`, keeps the statement text the
//! same for every batch size (so it is prepared once per connection), and
//! costs one bind instead of ten per row. Each dialect has a table function
//! for it: `jsonb_to_recordset` (PostgreSQL), `JSON_TABLE` (MariaDB 10.6+,
//! MySQL 8) and `json_each` (SQLite). The flush's inserts on MySQL and
//! SQLite are the exception: there reading the JSON cost more than the
//! rows' writes, so they bind every value (see `values`).
//!
//! The named statements (`queries/`) take rows as an array of arrays, each a
//! documented struct beside its statement serialised as its fields in order
//! ([`row_as_array`]) and named by alias in the statement, and keys as an
//! array of strings ([`keys_json`]). [`Dialect::select_by_keys`] and
//! [`Dialect::key_list`] build a key list's reading for the statements not
//! yet named.

use serde::Serialize;

use super::{Dialect, StoreError};

impl Dialect {
    /// A FROM-clause item that reads the JSON array of strings bound at its
    /// `?` (as [`keys_json`] makes it) as rows of one column, `k`, named
    /// `alias`.
    pub(crate) fn key_list(self, alias: &str) -> String {
        match self {
            Dialect::Postgres => {
                // A fragment for the statements not yet named (frequency caps, recipients).
                format!("(SELECT k FROM jsonb_array_elements_text(CAST(? AS jsonb)) AS r (k)) AS {alias}")
            }
            // A fragment for the statements not yet named (frequency caps, recipients).
            Dialect::MySql => format!(
                "JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) \
                 AS {alias}"
            ),
            // A fragment for the statements not yet named (frequency caps, recipients).
            Dialect::Sqlite => format!("(SELECT value AS k FROM json_each(?)) AS {alias}"),
        }
    }

    /// `SELECT {columns} FROM {table} {alias}` restricted to the rows whose
    /// `key` column is one of the keys bound (as [`keys_json`]) at its `?`,
    /// looked up one by one through that column's index. (MySQL is told to
    /// read the keys first: its planner cannot tell how many a JSON array
    /// holds and may otherwise scan the table.)
    ///
    /// On PostgreSQL the keys become one array, computed once, for
    /// `key = ANY(…)`, not a join:
    /// PostgreSQL takes any set-returning function to return 100 rows, and
    /// against a table of up to some tens of thousands of rows (a new
    /// install, a benchmark, a table retention keeps small) a hash join
    /// over a sequential scan of the table then looks cheaper than 100
    /// index lookups: every flush of a few rows read the whole outbox and
    /// the whole trigger table (`herald bench --pipeline` on PostgreSQL
    /// spent most of the server's time there). An `= ANY(array)` condition
    /// is planned as one index scan unless the table's statistics say it
    /// fits in a page or two. But a connection caches a statement's plan
    /// (a generic one after five executions), and one made while an
    /// analysed table was that small stays a sequential scan as the table
    /// grows, until the next `ANALYZE` (autovacuum's, after a tenth of the
    /// table has changed). `herald bench --pipeline` met that in its first
    /// minute: in a 5 s run 723 of 905 trigger-time reads and 513 outcome
    /// flushes scanned the whole table, 1 to 3 ms each against 0.02 ms. So
    /// the statements that find a few rows in a growing table on every
    /// batch (the flush's outbox update, the batch's trigger times) are
    /// sent unnamed on PostgreSQL (`persistent(false)`): planned at every
    /// execution for the table as it is, at the cost of one more round
    /// trip. Pipeline, alternating with them cached: 1.01-1.20x triggers/s
    /// in seven pairs, p99 17-21 -> 12.5-17 ms, backlog at the end 51-556 ->
    /// 21-51. Planning every statement instead (`plan_cache_mode =
    /// force_custom_plan`) measured no faster: it plans the big inserts too.
    pub(crate) fn select_by_keys(self, columns: &str, table: &str, alias: &str, key: &str) -> String {
        if self == Dialect::Postgres {
            // A fragment for the statements not yet named (frequency caps, recipients).
            return self.sql(&format!(
                "SELECT {columns} FROM {table} {alias} WHERE {alias}.{key} = \
                 ANY(ARRAY(SELECT jsonb_array_elements_text(CAST(? AS jsonb))))"
            ));
        }
        let keys = self.key_list("wanted");
        let join = if self == Dialect::MySql { "STRAIGHT_JOIN" } else { "JOIN" };
        // A fragment for the statements not yet named (frequency caps, recipients).
        self.sql(&format!("SELECT {columns} FROM {keys} {join} {table} {alias} ON {alias}.{key} = wanted.k"))
    }
}

/// Declares a row struct whose JSON form is an array of its fields in
/// declaration order: the named statement that reads it takes each field by
/// position and names it by alias (`r ->> 0 AS id`). Not objects read by
/// field name: PostgreSQL's `jsonb_to_recordset` cost the drain 12-20% and
/// the enqueue 17-20% (`herald bench --rows 20000`, alternating), and
/// SQLite parses an object again for every field it reads. The struct keeps
/// the fields' names and documents them; the statement's aliases repeat them.
macro_rules! row_as_array {
    ($(#[$meta:meta])* $vis:vis struct $name:ident<$lt:lifetime> {
        $($(#[$fmeta:meta])* $fvis:vis $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        $vis struct $name<$lt> {
            $($(#[$fmeta])* $fvis $field: $ty,)*
        }

        impl serde::Serialize for $name<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeTuple;
                let mut row = s.serialize_tuple([$(stringify!($field)),*].len())?;
                $(row.serialize_element(&self.$field)?;)*
                row.end()
            }
        }
    };
}
pub(crate) use row_as_array;

/// Distinct keys, sorted, as a JSON array of strings: a key list parameter
/// ([`Dialect::select_by_keys`], [`Dialect::key_list`], and the named
/// statements that take one).
pub(crate) fn keys_json<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<String, StoreError> {
    let mut keys: Vec<&str> = keys.into_iter().collect();
    keys.sort_unstable();
    keys.dedup();
    to_json(&keys)
}

row_as_array! {
    /// One claim, as `release_claims` reads it.
    #[derive(Debug)]
    pub(crate) struct ClaimRef<'a> {
        /// The outbox row.
        pub id: &'a str,
        /// The token it was claimed under: a row claimed again since is not
        /// given back.
        pub token: &'a str,
    }
}

/// Serialises rows for a statement that reads a JSON parameter: each row
/// a [`row_as_array`] struct or a tuple (a JSON array) with the columns in
/// the order the statement names them.
pub(crate) fn to_json<T: Serialize>(rows: &[T]) -> Result<String, StoreError> {
    serde_json::to_string(rows).map_err(|e| StoreError::Encode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_arrays_of_their_columns() {
        assert_eq!(to_json(&[("a", 1), ("b", 2)]).unwrap(), r#"[["a",1],["b",2]]"#);
    }

    /// PostgreSQL finds keyed rows through `= ANY(array)`, which it plans
    /// as an index scan whatever the table's size; a join against the JSON
    /// became a sequential scan of tables up to tens of thousands of rows.
    #[test]
    fn postgres_reads_keys_into_an_array_the_others_join() {
        assert_eq!(
            Dialect::Postgres.select_by_keys("t.id", "engagement_triggers", "t", "id"),
            "SELECT t.id FROM engagement_triggers t WHERE t.id = \
             ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))))"
        );
        assert_eq!(keys_json(["b", "a", "b"]).unwrap(), r#"["a","b"]"#);
        assert!(Dialect::Sqlite.select_by_keys("t.id", "engagement_triggers", "t", "id").contains(" JOIN "));
        assert!(Dialect::MySql.select_by_keys("t.id", "engagement_triggers", "t", "id").contains("STRAIGHT_JOIN"));
    }
}
