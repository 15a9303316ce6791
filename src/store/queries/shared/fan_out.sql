-- Statements SQLite and MariaDB share: triggers to many (see README.md
-- beside this file). Each statement's purpose is written beside
-- PostgreSQL's text of it (postgres/fan_out.sql).

-- name: fan_outs_to_expand
-- Triggers to many that are neither planned nor cancelled, and that no live
-- instance is expanding (its lease has passed, or none took it), oldest
-- first.
-- binds: now, limit
SELECT id FROM engagement_triggers
 WHERE audience IS NOT NULL AND planned_at IS NULL AND cancelled_at IS NULL
   AND (expand_until IS NULL OR expand_until < ?)
 ORDER BY created_at LIMIT ?;

-- name: take_fan_out
-- Takes the expansion of one trigger for this instance until `until`, by
-- compare-and-set on the lease: one instance expands a trigger at a time.
-- binds: owner, until, id, now
UPDATE engagement_triggers SET expand_owner = ?, expand_until = ?
 WHERE id = ? AND audience IS NOT NULL AND planned_at IS NULL AND cancelled_at IS NULL
   AND (expand_until IS NULL OR expand_until < ?);

-- name: fan_out_state
-- One trigger with its audience and expansion (the expander's job, and
-- GET /v1/triggers/{id}).
-- binds: id
SELECT id, type, user_id, payload, idempotency_key, occurred_at, created_at, planned_at, planned_count, plan_detail,
       audience, topic_key, actor_id, send_at, expand_cursor, expanded_count, audience_size, expand_owner,
       expand_until, cancelled_at, cancelled_by
  FROM engagement_triggers WHERE id = ?;

-- name: count_topic_audience
-- How many a topic trigger reaches: the subscribers when it was recorded
-- (created_at at or before the trigger's), but the actor.
-- binds: topic_key, snapshot, actor_id
SELECT COUNT(*) AS n FROM engagement_topic_subscriptions
 WHERE topic_key = ? AND created_at <= ? AND user_id <> COALESCE(?, '');

-- name: count_users_audience
-- How many a 'users' trigger reaches: its users, but the actor.
-- binds: trigger_id, actor_id
SELECT COUNT(*) AS n FROM engagement_trigger_users WHERE trigger_id = ? AND user_id <> COALESCE(?, '');

-- name: set_audience_size
-- The audience's size, counted when the expansion starts.
-- binds: size, id
UPDATE engagement_triggers SET audience_size = ? WHERE id = ?;

-- name: topic_chunk
-- The next chunk of a topic trigger's audience, in user-id order after the
-- cursor.
-- binds: topic_key, cursor, snapshot, actor_id, limit
SELECT user_id FROM engagement_topic_subscriptions
 WHERE topic_key = ? AND user_id > ? AND created_at <= ? AND user_id <> COALESCE(?, '')
 ORDER BY user_id LIMIT ?;

-- name: users_chunk
-- The next chunk of a 'users' trigger's audience, in user-id order after
-- the cursor.
-- binds: trigger_id, cursor, actor_id, limit
SELECT user_id FROM engagement_trigger_users
 WHERE trigger_id = ? AND user_id > ? AND user_id <> COALESCE(?, '')
 ORDER BY user_id LIMIT ?;

-- name: advance_fan_out
-- After the chunks up to `cursor` committed: where the next ones start,
-- how many recipients so far, and the lease renewed, if this instance
-- still holds it.
-- binds: cursor, recipients, until, id, owner
UPDATE engagement_triggers
   SET expand_cursor = ?, expanded_count = expanded_count + ?, expand_until = ?
 WHERE id = ? AND expand_owner = ? AND planned_at IS NULL AND cancelled_at IS NULL;

-- name: count_fan_out_rows
-- A trigger's outbox rows and digest items (see PostgreSQL's text).
-- binds: id, id
SELECT (SELECT COUNT(*) FROM engagement_outbox o WHERE o.trigger_id = ?)
     + (SELECT COUNT(*) FROM engagement_digest_items d WHERE d.trigger_id = ?) AS n;

-- name: finish_fan_out
-- The expansion is done: the trigger is planned, its lease let go (by the
-- instance holding it, and unless it was cancelled meanwhile).
-- binds: now, detail, planned_count, id, owner
UPDATE engagement_triggers
   SET planned_at = ?, plan_detail = ?, planned_count = ?, expand_owner = NULL, expand_until = NULL
 WHERE id = ? AND expand_owner = ? AND planned_at IS NULL AND cancelled_at IS NULL;

-- name: forget_trigger_users
-- A 'users' trigger's list, once its expansion is done or cancelled: the
-- rows it planned name their users, and retention has nothing else to
-- delete it by.
-- binds: id
DELETE FROM engagement_trigger_users WHERE trigger_id = ?;

-- name: cancel_trigger
-- Marks a trigger cancelled (its expansion stops at the next chunk), once.
-- binds: now, by, id
UPDATE engagement_triggers SET cancelled_at = ?, cancelled_by = ? WHERE id = ? AND cancelled_at IS NULL;

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
  FROM engagement_outbox WHERE trigger_id = ?
 GROUP BY 1, 2, 3;
