-- Herald's statements on MariaDB and MySQL: triggers to many, expanded in
-- chunks. How a block reads, and what holds for the whole dialect:
-- README.md beside this file and src/store/queries/mod.rs. Each statement's
-- purpose is written beside PostgreSQL's text of it (postgres/fan_out.sql);
-- the statements MariaDB shares with SQLite are in shared/fan_out.sql.

-- name: insert_fan_out_trigger
-- Records a trigger to many, unplanned; a taken idempotency key skips it (a
-- no-op update).
-- binds: id, type, payload, idempotency_key, request_hash, occurred_at, created_at, audience, topic_key, actor_id, send_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
                                 audience, topic_key, actor_id, send_at)
VALUES (?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key;

-- name: insert_trigger_users
-- The users a 'users' trigger names (a JSON array of ids), each once.
-- binds: trigger_id, user_ids
INSERT INTO engagement_trigger_users (trigger_id, user_id)
SELECT DISTINCT p.trigger_id, u.user_id
  FROM (SELECT ? AS trigger_id) AS p
 CROSS JOIN JSON_TABLE(?, '$[*]' COLUMNS (
         user_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS u
 WHERE true
    ON DUPLICATE KEY UPDATE user_id = engagement_trigger_users.user_id;

-- name: hold_fan_out
-- Says whether this instance still holds the trigger's expansion, under a
-- shared lock for the chunk's transaction (see PostgreSQL's text).
-- binds: id, owner
SELECT id FROM engagement_triggers
 WHERE id = ? AND expand_owner = ? AND planned_at IS NULL AND cancelled_at IS NULL
  LOCK IN SHARE MODE;

-- name: plan_topic_chunk
-- Plans one chunk of a topic trigger in one statement (see PostgreSQL's
-- text). The placeholders come in bind order, as MariaDB reads them. A
-- user id over 180 characters is hashed in the dedupe key, which must fit
-- VARCHAR(255) beside two 36-character ids (fan_out_dedupe_key in
-- src/planning/fan_out.rs does the same for rules planned in the process).
-- binds: first, trigger_id, payload, now, rules, topic_key, cursor, last, snapshot, actor_id
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT CONCAT(SUBSTR(k.h, 1, 8), '-', SUBSTR(k.h, 9, 4), '-7', SUBSTR(k.p, 1, 3), '-8', SUBSTR(k.p, 4, 3), '-',
              SUBSTR(k.m, 1, 12)),
       k.dedupe_key, k.rule_id, k.trigger_id, k.user_id, k.channel, k.payload, 'scheduled',
       k.first_due + k.place DIV 1000, k.expires_at,
       k.follow_up_at, 0, k.now, k.now
  FROM (SELECT LPAD(LOWER(HEX(d.now)), 12, '0') AS h, LPAD(LOWER(HEX(d.place MOD 16777216)), 6, '0') AS p,
               MD5(d.dedupe_key) AS m, d.*
          FROM (SELECT CONCAT(p.trigger_id, ':', r.rule_id, ':',
                              IF(CHAR_LENGTH(s.user_id) > 180, SHA2(s.user_id, 256), s.user_id)) AS dedupe_key,
                       p.trigger_id, p.payload, p.now, r.rule_id, s.user_id, r.channel,
                       r.due_at AS first_due,
                       ? + ROW_NUMBER() OVER (PARTITION BY r.rule_id ORDER BY s.user_id) - 1 AS place,
                       r.expires_at, r.follow_up_at
                  FROM (SELECT CAST(? AS CHAR) AS trigger_id, CAST(? AS CHAR) AS payload, CAST(? AS SIGNED) AS now) AS p
                 CROSS JOIN JSON_TABLE(?, '$[*]' COLUMNS (
                         rule_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                         channel VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                         due_at BIGINT PATH '$[2]',
                         expires_at BIGINT PATH '$[3]',
                         follow_up_at BIGINT PATH '$[4]')) AS r
                 CROSS JOIN engagement_topic_subscriptions s
                 WHERE s.topic_key = ? AND s.user_id > ? AND s.user_id <= ? AND s.created_at <= ?
                   AND s.user_id <> COALESCE(?, '')) AS d) AS k
    ON DUPLICATE KEY UPDATE dedupe_key = engagement_outbox.dedupe_key;

-- name: plan_users_chunk
-- plan_topic_chunk for a 'users' trigger: its users in (cursor, last].
-- binds: first, trigger_id, payload, now, rules, cursor, last, actor_id
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT CONCAT(SUBSTR(k.h, 1, 8), '-', SUBSTR(k.h, 9, 4), '-7', SUBSTR(k.p, 1, 3), '-8', SUBSTR(k.p, 4, 3), '-',
              SUBSTR(k.m, 1, 12)),
       k.dedupe_key, k.rule_id, k.trigger_id, k.user_id, k.channel, k.payload, 'scheduled',
       k.first_due + k.place DIV 1000, k.expires_at,
       k.follow_up_at, 0, k.now, k.now
  FROM (SELECT LPAD(LOWER(HEX(d.now)), 12, '0') AS h, LPAD(LOWER(HEX(d.place MOD 16777216)), 6, '0') AS p,
               MD5(d.dedupe_key) AS m, d.*
          FROM (SELECT CONCAT(p.trigger_id, ':', r.rule_id, ':',
                              IF(CHAR_LENGTH(s.user_id) > 180, SHA2(s.user_id, 256), s.user_id)) AS dedupe_key,
                       p.trigger_id, p.payload, p.now, r.rule_id, s.user_id, r.channel,
                       r.due_at AS first_due,
                       ? + ROW_NUMBER() OVER (PARTITION BY r.rule_id ORDER BY s.user_id) - 1 AS place,
                       r.expires_at, r.follow_up_at
                  FROM (SELECT CAST(? AS CHAR) AS trigger_id, CAST(? AS CHAR) AS payload, CAST(? AS SIGNED) AS now) AS p
                 CROSS JOIN JSON_TABLE(?, '$[*]' COLUMNS (
                         rule_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                         channel VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                         due_at BIGINT PATH '$[2]',
                         expires_at BIGINT PATH '$[3]',
                         follow_up_at BIGINT PATH '$[4]')) AS r
                 CROSS JOIN engagement_trigger_users s
                 WHERE s.trigger_id = p.trigger_id AND s.user_id > ? AND s.user_id <= ?
                   AND s.user_id <> COALESCE(?, '')) AS d) AS k
    ON DUPLICATE KEY UPDATE dedupe_key = engagement_outbox.dedupe_key;

-- name: lock_scheduled_trigger
-- Locks up to `limit` of a trigger's scheduled rows for
-- cancel_scheduled_trigger, and reads them (no RETURNING here).
-- binds: trigger_id, limit
SELECT id, rule_id, trigger_id, user_id, channel, attempts
  FROM engagement_outbox WHERE trigger_id = ? AND status = 'scheduled' ORDER BY id LIMIT ? FOR UPDATE;

-- name: cancel_scheduled_trigger
-- Cancels the rows lock_scheduled_trigger read (the same first `limit` by
-- id), `detail` saying why.
-- binds: detail, now, trigger_id, limit
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE trigger_id = ? AND status = 'scheduled' ORDER BY id LIMIT ?;
