-- Herald's statements on SQLite: triggers.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ------------------------------------------------------------------ triggers

-- name: insert_trigger
-- Records one trigger; one whose idempotency key exists is skipped (the
-- caller reads back which trigger holds the key).
-- binds: id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (idempotency_key) DO NOTHING;

-- name: accept_triggers
-- Records a batch of triggers planned in the same transaction (the API's
-- path): `triggers` is a JSON array of rows, each an array of
-- `TriggerJson`'s fields in order
-- (src/store/triggers.rs). A trigger whose idempotency key exists is skipped;
-- returns the ids written. (`WHERE true` lets SQLite parse the ON CONFLICT
-- after an INSERT … SELECT.)
-- binds: now, now, triggers
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at,
                                 created_at, planned_at, planned_count, plan_detail, send_at, actor_id)
SELECT t.id, t.type, t.user_id, t.payload, t.idempotency_key, t.request_hash, t.occurred_at, ?, ?,
       t.planned_count, t.plan_detail, t.send_at, t.actor_id
  FROM (SELECT value ->> 0 AS id, value ->> 1 AS type, value ->> 2 AS user_id,
               value ->> 3 AS payload, value ->> 4 AS idempotency_key,
               value ->> 5 AS request_hash, value ->> 6 AS occurred_at,
               value ->> 7 AS planned_count, value ->> 8 AS plan_detail,
               value ->> 9 AS send_at, value ->> 10 AS actor_id
          FROM json_each(?)) AS t
 WHERE true
    ON CONFLICT (idempotency_key) DO NOTHING RETURNING id;

-- name: triggers_by_idempotency_keys
-- The triggers that hold these idempotency keys (a JSON array of strings).
-- binds: keys
SELECT h.id, h.type, h.user_id, h.payload, h.idempotency_key, h.request_hash, h.occurred_at, h.created_at,
       h.planned_at, h.planned_count, h.plan_detail, h.send_at, h.actor_id, h.topic_key
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_triggers h ON h.idempotency_key = wanted.k;

-- name: plan_triggers
-- Marks triggers planned, by compare-and-set on planned_at (which planner
-- owns each trigger; the loser writes nothing for it): `plans` is a JSON
-- array of [id, planned_count, plan_detail] rows (`PlanJson`). Returns the ids won.
-- binds: plans, now
UPDATE engagement_triggers AS t
   SET planned_at = ?2, planned_count = p.planned_count, plan_detail = p.plan_detail
  FROM (SELECT value ->> 0 AS id, value ->> 1 AS planned_count,
               value ->> 2 AS plan_detail
          FROM json_each(?1)) AS p
 WHERE t.id = p.id AND t.planned_at IS NULL
RETURNING id;

-- name: trigger_times
-- When these triggers (a JSON array of ids) happened, their topic and
-- actor (what a message of theirs renders and checks).
-- binds: ids
SELECT t.id, t.occurred_at, t.topic_key, t.actor_id
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_triggers t ON t.id = wanted.k;

-- name: recorded_triggers
-- Which of these trigger ids (a JSON array of strings) are recorded.
-- binds: ids
SELECT t.id
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_triggers t ON t.id = wanted.k;
