-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: triggers.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/triggers.sql and mariadb/triggers.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: trigger_by_idempotency_key
-- The trigger that holds an idempotency key.
-- binds: idempotency_key
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE idempotency_key = ?;

-- name: get_trigger
-- One trigger by id.
-- binds: id
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE id = ?;

-- name: unplanned_triggers
-- Triggers the planner has not planned yet, oldest first.
-- binds: limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE planned_at IS NULL AND audience IS NULL ORDER BY created_at LIMIT ?;

-- name: outbox_for_trigger
-- The outbox rows planned from one trigger.
-- binds: trigger_id
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE trigger_id = ? ORDER BY id;

-- name: recent_triggers
-- The most recent triggers of a type, newest first (rule previews).
-- binds: type, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE type = ? ORDER BY created_at DESC LIMIT ?;

-- name: triggers_for_user
-- A user's triggers, newest first.
-- binds: user_id, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE user_id = ? ORDER BY created_at DESC LIMIT ?;
