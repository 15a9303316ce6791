-- PostgreSQL moves its indexed text columns to COLLATE "C" (byte order).
-- Here they already compare bytes: SQLite's BINARY, MariaDB's utf8mb4_bin.
SELECT 1;
