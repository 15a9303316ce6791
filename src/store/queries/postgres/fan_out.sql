-- Herald's statements on PostgreSQL: triggers to many (a topic's
-- subscribers, or a list of users), expanded in chunks.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs. Why the expansion works as it
-- does: src/planning/fan_out.rs.

-- ------------------------------------------------------------------ record

-- name: insert_fan_out_trigger
-- Records a trigger to many, unplanned (the expander plans it). One whose
-- idempotency key exists is skipped (the caller reads back which trigger
-- holds the key). Its `user_id` is '': nobody in particular.
-- binds: id, type, payload, idempotency_key, request_hash, occurred_at, created_at, audience, topic_key, actor_id, send_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
                                 audience, topic_key, actor_id, send_at)
VALUES ($1, $2, '', $3, $4, $5, $6, $7, $8, $9, $10, $11)
    ON CONFLICT (idempotency_key) DO NOTHING;

-- name: insert_trigger_users
-- The users a 'users' trigger names (a JSON array of ids), each once.
-- binds: trigger_id, user_ids
INSERT INTO engagement_trigger_users (trigger_id, user_id)
SELECT DISTINCT $1, u.value
  FROM jsonb_array_elements_text(CAST($2 AS jsonb)) AS u
    ON CONFLICT DO NOTHING;

-- ------------------------------------------------------------------ the expander

-- name: fan_outs_to_expand
-- Triggers to many that are neither planned nor cancelled, and that no live
-- instance is expanding (its lease has passed, or none took it), oldest
-- first.
-- binds: now, limit
SELECT id FROM engagement_triggers
 WHERE audience IS NOT NULL AND planned_at IS NULL AND cancelled_at IS NULL
   AND (expand_until IS NULL OR expand_until < $1)
 ORDER BY created_at LIMIT $2;

-- name: take_fan_out
-- Takes the expansion of one trigger for this instance until `until`, by
-- compare-and-set on the lease: one instance expands a trigger at a time.
-- binds: owner, until, id, now
UPDATE engagement_triggers SET expand_owner = $1, expand_until = $2
 WHERE id = $3 AND audience IS NOT NULL AND planned_at IS NULL AND cancelled_at IS NULL
   AND (expand_until IS NULL OR expand_until < $4);

-- name: hold_fan_out
-- Says whether this instance still holds the trigger's expansion (another
-- may have taken it over after the lease passed, or it was cancelled): no
-- row when it does not. A shared lock for the chunk's transaction: the
-- chunks one instance plans side by side do not wait for each other, and
-- a cancel (an update) waits for the chunks in flight, or they see it.
-- binds: id, owner
SELECT id FROM engagement_triggers
 WHERE id = $1 AND expand_owner = $2 AND planned_at IS NULL AND cancelled_at IS NULL
   FOR SHARE;

-- name: fan_out_state
-- One trigger with its audience and expansion (the expander's job, and
-- GET /v1/triggers/{id}).
-- binds: id
SELECT id, type, user_id, payload, idempotency_key, occurred_at, created_at, planned_at, planned_count, plan_detail,
       audience, topic_key, actor_id, send_at, expand_cursor, expanded_count, audience_size, expand_owner,
       expand_until, cancelled_at, cancelled_by
  FROM engagement_triggers WHERE id = $1;

-- name: count_topic_audience
-- How many a topic trigger reaches: the subscribers when it was recorded
-- (created_at at or before the trigger's), but the actor.
-- binds: topic_key, snapshot, actor_id
SELECT COUNT(*) AS n FROM engagement_topic_subscriptions
 WHERE topic_key = $1 AND created_at <= $2 AND user_id <> COALESCE($3, '');

-- name: count_users_audience
-- How many a 'users' trigger reaches: its users, but the actor.
-- binds: trigger_id, actor_id
SELECT COUNT(*) AS n FROM engagement_trigger_users WHERE trigger_id = $1 AND user_id <> COALESCE($2, '');

-- name: set_audience_size
-- The audience's size, counted when the expansion starts.
-- binds: size, id
UPDATE engagement_triggers SET audience_size = $1 WHERE id = $2;

-- name: topic_chunk
-- The next chunk of a topic trigger's audience, in user-id order after the
-- cursor.
-- binds: topic_key, cursor, snapshot, actor_id, limit
SELECT user_id FROM engagement_topic_subscriptions
 WHERE topic_key = $1 AND user_id > $2 AND created_at <= $3 AND user_id <> COALESCE($4, '')
 ORDER BY user_id LIMIT $5;

-- name: users_chunk
-- The next chunk of a 'users' trigger's audience, in user-id order after
-- the cursor.
-- binds: trigger_id, cursor, actor_id, limit
SELECT user_id FROM engagement_trigger_users
 WHERE trigger_id = $1 AND user_id > $2 AND user_id <> COALESCE($3, '')
 ORDER BY user_id LIMIT $4;

-- name: plan_topic_chunk
-- Plans one chunk of a topic trigger in one statement: a row for each
-- subscriber in (cursor, last] and each rule in `rules` (a JSON array of
-- [rule_id, channel, due_at, expires_at, follow_up_at]). The dedupe key
-- trigger:rule:user is unique, so a chunk planned twice (a crash after the
-- commit, before the next chunk) adds nothing. The id is a UUIDv7 of `now`
-- whose next 24 bits are the recipient's place in the audience and whose
-- last 48 the MD5 of that key: time-ordered like Herald's other ids, made
-- here so the rows never travel through the process, and ascending within
-- the chunk, so the primary key and the indexes ending in the id take each
-- row at their right edge. With the MD5's bits in the place's (ids in
-- random order within the chunk) 200,000 rows took 5.0-5.2 s in psql
-- instead of 3.0-3.4 s.
-- Each thousand recipients are due a millisecond after the thousand before
-- (`first` is the chunk's first recipient's place in the audience, from 0):
-- the worker's backlog cursor moves by due time (src/delivery/worker/lane.rs),
-- and a million rows due at one instant leave it nowhere to move: every
-- read of the backlog would start at the first and leave out every row
-- still being recorded. The last of a million is due a second after the
-- first.
-- binds: first, trigger_id, payload, now, rules, topic_key, cursor, last, snapshot, actor_id
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT substr(t.h, 1, 8) || '-' || substr(t.h, 9, 4) || '-7' || substr(t.p, 1, 3) || '-8' || substr(t.p, 4, 3)
           || '-' || substr(t.m, 1, 12),
       t.dedupe_key, t.rule_id, $2, t.user_id, t.channel, $3, 'scheduled', t.first_due + t.place / 1000,
       t.expires_at, t.follow_up_at, 0, $4, $4
  FROM (SELECT lpad(to_hex(CAST($4 AS bigint)), 12, '0') AS h, lpad(to_hex(k.place % 16777216), 6, '0') AS p,
               md5(k.dedupe_key) AS m, k.*
          FROM (SELECT $2 || ':' || r.rule_id || ':' || s.user_id AS dedupe_key, r.rule_id, s.user_id, r.channel,
                       $1 + ROW_NUMBER() OVER (PARTITION BY r.rule_id ORDER BY s.user_id) - 1 AS place,
                       r.due_at AS first_due, r.expires_at, r.follow_up_at
                  FROM engagement_topic_subscriptions s
                 CROSS JOIN (SELECT x ->> 0 AS rule_id, x ->> 1 AS channel, CAST(x ->> 2 AS bigint) AS due_at,
                                    CAST(x ->> 3 AS bigint) AS expires_at, CAST(x ->> 4 AS bigint) AS follow_up_at
                               FROM jsonb_array_elements(CAST($5 AS jsonb)) AS x) AS r
                 WHERE s.topic_key = $6 AND s.user_id > $7 AND s.user_id <= $8 AND s.created_at <= $9
                   AND s.user_id <> COALESCE($10, '')) AS k) AS t
    ON CONFLICT (dedupe_key) DO NOTHING;

-- name: plan_users_chunk
-- plan_topic_chunk for a 'users' trigger: its users in (cursor, last].
-- binds: first, trigger_id, payload, now, rules, cursor, last, actor_id
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT substr(t.h, 1, 8) || '-' || substr(t.h, 9, 4) || '-7' || substr(t.p, 1, 3) || '-8' || substr(t.p, 4, 3)
           || '-' || substr(t.m, 1, 12),
       t.dedupe_key, t.rule_id, $2, t.user_id, t.channel, $3, 'scheduled', t.first_due + t.place / 1000,
       t.expires_at, t.follow_up_at, 0, $4, $4
  FROM (SELECT lpad(to_hex(CAST($4 AS bigint)), 12, '0') AS h, lpad(to_hex(k.place % 16777216), 6, '0') AS p,
               md5(k.dedupe_key) AS m, k.*
          FROM (SELECT $2 || ':' || r.rule_id || ':' || s.user_id AS dedupe_key, r.rule_id, s.user_id, r.channel,
                       $1 + ROW_NUMBER() OVER (PARTITION BY r.rule_id ORDER BY s.user_id) - 1 AS place,
                       r.due_at AS first_due, r.expires_at, r.follow_up_at
                  FROM engagement_trigger_users s
                 CROSS JOIN (SELECT x ->> 0 AS rule_id, x ->> 1 AS channel, CAST(x ->> 2 AS bigint) AS due_at,
                                    CAST(x ->> 3 AS bigint) AS expires_at, CAST(x ->> 4 AS bigint) AS follow_up_at
                               FROM jsonb_array_elements(CAST($5 AS jsonb)) AS x) AS r
                 WHERE s.trigger_id = $2 AND s.user_id > $6 AND s.user_id <= $7
                   AND s.user_id <> COALESCE($8, '')) AS k) AS t
    ON CONFLICT (dedupe_key) DO NOTHING;

-- name: advance_fan_out
-- After the chunks up to `cursor` committed: where the next ones start,
-- how many recipients so far, and the lease renewed, if this instance
-- still holds it.
-- binds: cursor, recipients, until, id, owner
UPDATE engagement_triggers
   SET expand_cursor = $1, expanded_count = expanded_count + $2, expand_until = $3
 WHERE id = $4 AND expand_owner = $5 AND planned_at IS NULL AND cancelled_at IS NULL;

-- name: count_fan_out_rows
-- A trigger's outbox rows and digest items, counted when its expansion
-- finishes rather than added up chunk by chunk: a chunk committed just
-- before a crash is planned again by the next instance, adding nothing,
-- and a running sum would miss it.
-- binds: id, id
SELECT (SELECT COUNT(*) FROM engagement_outbox o WHERE o.trigger_id = $1)
     + (SELECT COUNT(*) FROM engagement_digest_items d WHERE d.trigger_id = $2) AS n;

-- name: finish_fan_out
-- The expansion is done: the trigger is planned, its lease let go (by the
-- instance holding it, and unless it was cancelled meanwhile).
-- binds: now, detail, planned_count, id, owner
UPDATE engagement_triggers
   SET planned_at = $1, plan_detail = $2, planned_count = $3, expand_owner = NULL, expand_until = NULL
 WHERE id = $4 AND expand_owner = $5 AND planned_at IS NULL AND cancelled_at IS NULL;

-- ------------------------------------------------------------------ the audience's outcome

-- name: forget_trigger_users
-- A 'users' trigger's list, once its expansion is done or cancelled: the
-- rows it planned name their users, and retention has nothing else to
-- delete it by.
-- binds: id
DELETE FROM engagement_trigger_users WHERE trigger_id = $1;

-- name: cancel_trigger
-- Marks a trigger cancelled (its expansion stops at the next chunk), once.
-- binds: now, by, id
UPDATE engagement_triggers SET cancelled_at = $1, cancelled_by = $2 WHERE id = $3 AND cancelled_at IS NULL;

-- name: cancel_scheduled_trigger
-- Cancels up to `limit` of a trigger's scheduled rows, `detail` saying why
-- (the caller repeats it until none is left, so a million rows are not one
-- transaction).
-- binds: detail, now, trigger_id, limit
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = $1, claim_token = NULL, updated_at = $2
 WHERE id IN (SELECT id FROM engagement_outbox WHERE trigger_id = $3 AND status = 'scheduled' LIMIT $4)
   AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;

-- name: trigger_outcomes
-- A trigger's messages counted by status and channel, and by why not
-- (`reason`, for rows that did not go: see `WhyNot` in
-- src/store/fan_out.rs for the words each class matches).
-- binds: trigger_id
SELECT status, channel,
       CASE WHEN status NOT IN ('suppressed', 'cancelled', 'expired', 'failed') THEN ''
            WHEN last_error LIKE '%opted out%' OR last_error LIKE '%unsubscribed%' THEN 'opted_out'
            WHEN last_error LIKE '%muted topic%' THEN 'muted'
            WHEN last_error LIKE 'frequency cap%' THEN 'capped'
            WHEN last_error LIKE '%has no email address%' OR last_error LIKE 'no phone number%'
              OR last_error LIKE 'no Slack user id%' OR last_error LIKE 'no push subscription%' THEN 'no_address'
            WHEN status = 'suppressed' THEN 'suppressed'
            ELSE status END AS reason,
       COUNT(*) AS n
  FROM engagement_outbox WHERE trigger_id = $1
 GROUP BY 1, 2, 3;
