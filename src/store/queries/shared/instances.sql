-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: instances.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/instances.sql and mariadb/instances.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: end_lease
-- Gives an instance's lease up (a clean shutdown).
-- binds: id
DELETE FROM engagement_instances WHERE id = ?;

-- name: rescue_lapsed
-- Takes back `sending` rows claimed before `cutoff` by an instance whose
-- lease was not valid at `cutoff`. `status = 'sending'` first: the status
-- index (whose predicate, `status <> 'sent'`, is repeated for SQLite and
-- PostgreSQL's generic plans) finds the few rows in flight; the lease is
-- looked up per row by primary key.
-- binds: detail, now, cutoff, cutoff
UPDATE engagement_outbox
   SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, last_error = ?, updated_at = ?
 WHERE status = 'sending' AND status <> 'sent' AND claimed_by IS NOT NULL AND claimed_at < ?
   AND NOT EXISTS (SELECT 1 FROM engagement_instances i
                    WHERE i.id = engagement_outbox.claimed_by AND i.expires_at >= ?);

-- name: forget_lapsed_instances
-- Forgets instance rows whose lease lapsed before `cutoff`.
-- binds: cutoff
DELETE FROM engagement_instances WHERE expires_at < ?;

-- name: list_instances
-- Every instance row, newest lease first.
-- binds:
SELECT id, host, pid, started_at, renewed_at, expires_at FROM engagement_instances ORDER BY expires_at DESC;
