-- Herald's statements on SQLite: triggers to many, expanded in chunks.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs. Each statement's purpose is
-- written beside PostgreSQL's text of it (postgres/fan_out.sql); the
-- statements SQLite shares with MariaDB are in shared/fan_out.sql.

-- name: insert_fan_out_trigger
-- Records a trigger to many, unplanned; a taken idempotency key skips it.
-- binds: id, type, payload, idempotency_key, request_hash, occurred_at, created_at, audience, topic_key, actor_id, send_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
                                 audience, topic_key, actor_id, send_at)
VALUES (?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (idempotency_key) DO NOTHING;

-- name: insert_trigger_users
-- The users a 'users' trigger names (a JSON array of ids), each once.
-- (`WHERE true` lets SQLite parse the ON CONFLICT after an INSERT … SELECT.)
-- binds: trigger_id, user_ids
INSERT INTO engagement_trigger_users (trigger_id, user_id)
SELECT DISTINCT ?1, value FROM json_each(?2) WHERE true
    ON CONFLICT DO NOTHING;

-- name: hold_fan_out
-- Whether this instance still holds the trigger's expansion (the write
-- transaction is already the only writer: no lock to take).
-- binds: id, owner
SELECT id FROM engagement_triggers
 WHERE id = ? AND expand_owner = ? AND planned_at IS NULL AND cancelled_at IS NULL;

-- name: plan_topic_chunk
-- Plans one chunk of a topic trigger in one statement (see PostgreSQL's
-- text). The id's last 48 bits are random here: SQLite has no MD5, and the
-- dedupe key, not the id, is what keeps a row from being planned twice.
-- binds: first, trigger_id, payload, now, rules, topic_key, cursor, last, snapshot, actor_id
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT substr(t.h, 1, 8) || '-' || substr(t.h, 9, 4) || '-7' || substr(t.p, 1, 3) || '-8' || substr(t.p, 4, 3)
           || '-' || t.m,
       t.dedupe_key, t.rule_id, ?2, t.user_id, t.channel, ?3, 'scheduled', t.first_due + t.place / 1000,
       t.expires_at, t.follow_up_at, 0, ?4, ?4
  FROM (SELECT printf('%012x', ?4) AS h, printf('%06x', u.place % 16777216) AS p, lower(hex(randomblob(6))) AS m, u.*
          FROM (SELECT ?2 || ':' || r.rule_id || ':' || s.user_id AS dedupe_key, r.rule_id, s.user_id, r.channel,
                       ?1 + ROW_NUMBER() OVER (PARTITION BY r.rule_id ORDER BY s.user_id) - 1 AS place,
                       r.due_at AS first_due, r.expires_at, r.follow_up_at
                  FROM engagement_topic_subscriptions s
                 CROSS JOIN (SELECT value ->> 0 AS rule_id, value ->> 1 AS channel, value ->> 2 AS due_at,
                                    value ->> 3 AS expires_at, value ->> 4 AS follow_up_at
                               FROM json_each(?5)) AS r
                 WHERE s.topic_key = ?6 AND s.user_id > ?7 AND s.user_id <= ?8 AND s.created_at <= ?9
                   AND s.user_id <> COALESCE(?10, '')) AS u) AS t
 WHERE true
    ON CONFLICT (dedupe_key) DO NOTHING;

-- name: plan_users_chunk
-- plan_topic_chunk for a 'users' trigger: its users in (cursor, last].
-- binds: first, trigger_id, payload, now, rules, cursor, last, actor_id
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT substr(t.h, 1, 8) || '-' || substr(t.h, 9, 4) || '-7' || substr(t.p, 1, 3) || '-8' || substr(t.p, 4, 3)
           || '-' || t.m,
       t.dedupe_key, t.rule_id, ?2, t.user_id, t.channel, ?3, 'scheduled', t.first_due + t.place / 1000,
       t.expires_at, t.follow_up_at, 0, ?4, ?4
  FROM (SELECT printf('%012x', ?4) AS h, printf('%06x', u.place % 16777216) AS p, lower(hex(randomblob(6))) AS m, u.*
          FROM (SELECT ?2 || ':' || r.rule_id || ':' || s.user_id AS dedupe_key, r.rule_id, s.user_id, r.channel,
                       ?1 + ROW_NUMBER() OVER (PARTITION BY r.rule_id ORDER BY s.user_id) - 1 AS place,
                       r.due_at AS first_due, r.expires_at, r.follow_up_at
                  FROM engagement_trigger_users s
                 CROSS JOIN (SELECT value ->> 0 AS rule_id, value ->> 1 AS channel, value ->> 2 AS due_at,
                                    value ->> 3 AS expires_at, value ->> 4 AS follow_up_at
                               FROM json_each(?5)) AS r
                 WHERE s.trigger_id = ?2 AND s.user_id > ?6 AND s.user_id <= ?7
                   AND s.user_id <> COALESCE(?8, '')) AS u) AS t
 WHERE true
    ON CONFLICT (dedupe_key) DO NOTHING;

-- name: cancel_scheduled_trigger
-- Cancels up to `limit` of a trigger's scheduled rows, `detail` saying why.
-- binds: detail, now, trigger_id, limit
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE id IN (SELECT id FROM engagement_outbox WHERE trigger_id = ? AND status = 'scheduled' LIMIT ?)
   AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;
