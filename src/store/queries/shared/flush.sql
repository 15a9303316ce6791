-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: flush.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/flush.sql and mariadb/flush.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: newest_position
-- The newest position of a committed transaction (or, after
-- reserve_positions, of this one).
-- binds:
SELECT last FROM engagement_sequences WHERE name = 'stream';
