-- Herald's statements on PostgreSQL: instances and their leases.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ----------------------------------------------------------------- instances

-- name: end_lease
-- Gives an instance's lease up (a clean shutdown).
-- binds: id
DELETE FROM engagement_instances WHERE id = $1;

-- name: rescue_lapsed
-- Takes back `sending` rows claimed before `cutoff` by an instance whose
-- lease was not valid at `cutoff`. `status = 'sending'` first: the status
-- index (whose predicate, `status <> 'sent'`, is repeated for SQLite and
-- PostgreSQL's generic plans) finds the few rows in flight; the lease is
-- looked up per row by primary key.
-- binds: detail, now, cutoff, cutoff
UPDATE engagement_outbox
   SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, last_error = $1, updated_at = $2
 WHERE status = 'sending' AND status <> 'sent' AND claimed_by IS NOT NULL AND claimed_at < $3
   AND NOT EXISTS (SELECT 1 FROM engagement_instances i
                    WHERE i.id = engagement_outbox.claimed_by AND i.expires_at >= $4);

-- name: forget_lapsed_instances
-- Forgets instance rows whose lease lapsed before `cutoff`.
-- binds: cutoff
DELETE FROM engagement_instances WHERE expires_at < $1;

-- name: list_instances
-- Every instance row, newest lease first.
-- binds:
SELECT id, host, pid, started_at, renewed_at, expires_at FROM engagement_instances ORDER BY expires_at DESC;

-- name: renew_lease
-- Takes or renews an instance's lease.
-- binds: id, host, pid, started_at, renewed_at, expires_at
INSERT INTO engagement_instances (id, host, pid, started_at, renewed_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
    ON CONFLICT (id) DO UPDATE SET renewed_at = excluded.renewed_at, expires_at = excluded.expires_at;
