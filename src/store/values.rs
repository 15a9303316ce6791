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
//! A `VALUES` list's text changes with its length, and each text is a new
//! prepared statement, so a batch is cut into runs whose lengths come from
//! a fixed ladder (powers of two up to [`MAX_ROWS`]): at most nine texts per
//! table, each prepared once per connection, and at most
//! `len / MAX_ROWS + log2(MAX_ROWS) + 1` statements per batch.

use super::Dialect;

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

/// `(?, …), (?, …), …`: `rows` groups of `columns` placeholders.
pub(crate) fn placeholders(columns: usize, rows: usize) -> String {
    let row = format!("({})", vec!["?"; columns].join(", "));
    vec![row; rows].join(", ")
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
    fn placeholders_repeat_one_group_per_row() {
        assert_eq!(placeholders(3, 2), "(?, ?, ?), (?, ?, ?)");
        assert_eq!(placeholders(1, 1), "(?)");
    }
}
