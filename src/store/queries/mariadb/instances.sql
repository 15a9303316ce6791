-- Herald's statements on MariaDB and MySQL: instances and their leases.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ----------------------------------------------------------------- instances

-- name: renew_lease
-- Takes or renews an instance's lease.
-- binds: id, host, pid, started_at, renewed_at, expires_at
INSERT INTO engagement_instances (id, host, pid, started_at, renewed_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE renewed_at = VALUES(renewed_at), expires_at = VALUES(expires_at);
