-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: outbox.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/outbox.sql and mariadb/outbox.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: reclaim_stale
-- Takes back claims made before `cutoff`: their owner died or stalled. Served
-- by the status index (few rows are ever 'sending'); SQLite uses it only
-- when the query names its predicate, `status <> 'sent'`.
-- binds: detail, now, cutoff
UPDATE engagement_outbox
   SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, last_error = ?, updated_at = ?
 WHERE status = 'sending' AND status <> 'sent' AND claimed_at < ?;

-- name: count_by_status
-- Outbox rows by status, for `herald status`.
-- binds:
SELECT status, COUNT(*) FROM engagement_outbox GROUP BY status;

-- name: get_outbox
-- One outbox row by id.
-- binds: id
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE id = ?;

-- name: sends_for_user
-- "Did X get it": a user's send log, newest first.
-- binds: user_id, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at, provider_id
  FROM engagement_sends WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?;

-- name: sends_for_outbox
-- One outbox row's send log, oldest first.
-- binds: outbox_id
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at, provider_id
  FROM engagement_sends WHERE outbox_id = ? ORDER BY created_at, id;

-- name: pending_for_user
-- A user's rows still waiting (scheduled or being delivered), newest first.
-- binds: user_id, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE user_id = ? AND status IN ('scheduled', 'sending') ORDER BY id DESC LIMIT ?;

-- name: inbox_for_user
-- A user's inbox, newest first (in commit order).
-- binds: user_id, limit
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox WHERE user_id = ? ORDER BY position DESC LIMIT ?;
