-- The outbox's per-row cost (issue 12): PostgreSQL and SQLite make the
-- status, rule and trigger indexes partial. MariaDB has no partial index,
-- and InnoDB already writes only the secondary indexes whose columns an
-- update changes (a status change touches the status index, not the rule,
-- trigger or user index), so nothing changes here.
SELECT 1;
