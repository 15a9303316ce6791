-- Herald's statements on PostgreSQL: triggers.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ------------------------------------------------------------------ triggers

-- name: insert_trigger
-- Records one trigger; one whose idempotency key exists is skipped (the
-- caller reads back which trigger holds the key).
-- binds: id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (idempotency_key) DO NOTHING;

-- name: trigger_by_idempotency_key
-- The trigger that holds an idempotency key.
-- binds: idempotency_key
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE idempotency_key = $1;

-- name: accept_triggers
-- Records a batch of triggers planned in the same transaction (the API's
-- path): `triggers` is a JSON array of rows, each an array of
-- `TriggerJson`'s fields in order
-- (src/store/triggers.rs). A trigger whose idempotency key exists is skipped;
-- returns the ids written.
-- binds: now, now, triggers
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at,
                                 created_at, planned_at, planned_count, plan_detail, send_at, actor_id)
SELECT t.id, t.type, t.user_id, t.payload, t.idempotency_key, t.request_hash, t.occurred_at, $1, $2,
       t.planned_count, t.plan_detail, t.send_at, t.actor_id
  FROM (SELECT r ->> 0 AS id,
               r ->> 1 AS type,
               r ->> 2 AS user_id,
               r ->> 3 AS payload,
               r ->> 4 AS idempotency_key,
               r ->> 5 AS request_hash,
               CAST(r ->> 6 AS bigint) AS occurred_at,
               CAST(r ->> 7 AS bigint) AS planned_count,
               r ->> 8 AS plan_detail,
               CAST(r ->> 9 AS bigint) AS send_at,
               r ->> 10 AS actor_id
          FROM jsonb_array_elements(CAST($3 AS jsonb)) AS r) AS t
    ON CONFLICT (idempotency_key) DO NOTHING RETURNING id;

-- name: triggers_by_idempotency_keys
-- The triggers that hold these idempotency keys (a JSON array of strings),
-- found through an array computed once (see the file's head).
-- binds: keys
SELECT h.id, h.type, h.user_id, h.payload, h.idempotency_key, h.request_hash, h.occurred_at, h.created_at,
       h.planned_at, h.planned_count, h.plan_detail, h.send_at, h.actor_id, h.topic_key
  FROM engagement_triggers h
 WHERE h.idempotency_key = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: plan_triggers
-- Marks triggers planned, by compare-and-set on planned_at (which planner
-- owns each trigger; the loser writes nothing for it): `plans` is a JSON
-- array of [id, planned_count, plan_detail] rows (`PlanJson`). Returns the ids won.
-- binds: plans, now
UPDATE engagement_triggers AS t
   SET planned_at = $2, planned_count = p.planned_count, plan_detail = p.plan_detail
  FROM (SELECT r ->> 0 AS id,
               CAST(r ->> 1 AS bigint) AS planned_count,
               r ->> 2 AS plan_detail
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS p
 WHERE t.id = p.id AND t.planned_at IS NULL
RETURNING t.id;

-- name: get_trigger
-- One trigger by id.
-- binds: id
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE id = $1;

-- name: trigger_times
-- When these triggers (a JSON array of ids) happened, their topic and
-- actor (what a message of theirs renders and checks). Sent unnamed: see the
-- flush's note above.
-- binds: ids
SELECT t.id, t.occurred_at, t.topic_key, t.actor_id
  FROM engagement_triggers t
 WHERE t.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: recorded_triggers
-- Which of these trigger ids (a JSON array of strings) are recorded.
-- binds: ids
SELECT t.id
  FROM engagement_triggers t
 WHERE t.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: unplanned_triggers
-- Triggers the planner has not planned yet, oldest first.
-- binds: limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE planned_at IS NULL AND audience IS NULL ORDER BY created_at LIMIT $1;

-- name: outbox_for_trigger
-- The outbox rows planned from one trigger.
-- binds: trigger_id
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE trigger_id = $1 ORDER BY id;

-- name: recent_triggers
-- The most recent triggers of a type, newest first (rule previews).
-- binds: type, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE type = $1 ORDER BY created_at DESC LIMIT $2;

-- name: triggers_for_user
-- A user's triggers, newest first.
-- binds: user_id, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail, send_at, actor_id, topic_key
  FROM engagement_triggers WHERE user_id = $1 ORDER BY created_at DESC LIMIT $2;
