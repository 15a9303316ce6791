-- Herald's statements on MariaDB and MySQL: triggers.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ------------------------------------------------------------------ triggers

-- name: insert_trigger
-- Records one trigger; one whose idempotency key exists is skipped (a no-op
-- update; the caller reads back which trigger holds the key).
-- binds: id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key;

-- name: accept_triggers
-- Records a batch of triggers planned in the same transaction (the API's
-- path): `triggers` is a JSON array of rows, each an array of
-- `TriggerJson`'s fields in order
-- (src/store/triggers.rs). A trigger whose idempotency key exists is skipped
-- (a no-op update); MariaDB cannot say which, so the caller reads the
-- holders of the keys back (triggers_by_idempotency_keys).
-- binds: now, now, triggers
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at,
                                 created_at, planned_at, planned_count, plan_detail, send_at, actor_id)
SELECT t.id, t.type, t.user_id, t.payload, t.idempotency_key, t.request_hash, t.occurred_at, ?, ?,
       t.planned_count, t.plan_detail, t.send_at, t.actor_id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
         user_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
         payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
         idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
         request_hash VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]',
         occurred_at BIGINT PATH '$[6]',
         planned_count BIGINT PATH '$[7]',
         plan_detail LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[8]',
         send_at BIGINT PATH '$[9]',
         actor_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[10]')) AS t
    ON DUPLICATE KEY UPDATE idempotency_key = engagement_triggers.idempotency_key;

-- name: triggers_by_idempotency_keys
-- The triggers that hold these idempotency keys (a JSON array of strings).
-- binds: keys
SELECT h.id, h.type, h.user_id, h.payload, h.idempotency_key, h.request_hash, h.occurred_at, h.created_at,
       h.planned_at, h.planned_count, h.plan_detail, h.send_at, h.actor_id, h.topic_key
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers h ON h.idempotency_key = wanted.k;

-- name: lock_unplanned
-- The triggers plan_triggers will mark (no RETURNING here), locked first:
-- `plans` as in plan_triggers.
-- binds: plans
SELECT t.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]')) AS p
  STRAIGHT_JOIN engagement_triggers t ON t.id = p.id
 WHERE t.planned_at IS NULL
   FOR UPDATE;

-- name: plan_triggers
-- Marks triggers planned, by compare-and-set on planned_at (which planner
-- owns each trigger; the loser writes nothing for it): `plans` is a JSON
-- array of [id, planned_count, plan_detail] rows (`PlanJson`). The rows won are those
-- lock_unplanned returned.
-- binds: plans, now
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         planned_count BIGINT PATH '$[1]',
         plan_detail LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS p
  STRAIGHT_JOIN engagement_triggers t ON t.id = p.id
   SET t.planned_at = ?, t.planned_count = p.planned_count, t.plan_detail = p.plan_detail
 WHERE t.planned_at IS NULL;

-- name: trigger_times
-- When these triggers (a JSON array of ids) happened, their topic and
-- actor (what a message of theirs renders and checks).
-- binds: ids
SELECT t.id, t.occurred_at, t.topic_key, t.actor_id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers t ON t.id = wanted.k;

-- name: recorded_triggers
-- Which of these trigger ids (a JSON array of strings) are recorded, on a
-- MySQL server (or a MariaDB that refused recorded_triggers_synced).
-- binds: ids
SELECT t.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers t ON t.id = wanted.k;

-- name: recorded_triggers_synced
-- recorded_triggers after this Galera node has applied every write the
-- cluster committed before it (wsrep_sync_wait, MariaDB's per-statement
-- variable; without effect on a server that is not a Galera node).
-- binds: ids
SET STATEMENT wsrep_sync_wait = 1 FOR
SELECT t.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers t ON t.id = wanted.k;
