-- Herald's statements on PostgreSQL: the outbox: the claim, what an operator reads, the insert,
-- cancelling.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ---------------------------------------------------------------- the claim

-- name: claim_channel
-- Claims up to `limit` of one channel's due rows, oldest due first, for this
-- instance under `token`, and counts the attempt. The subquery picks the
-- candidates; the outer status test is the compare-and-set: two instances
-- may pick the same ids, and PostgreSQL re-checks the WHERE after waiting on
-- a row another claim changed, so each row goes to one.
-- binds: token, instance, now, now, channel, now, limit
UPDATE engagement_outbox
   SET status = 'sending', claim_token = $1, claimed_by = $2, claimed_at = $3, updated_at = $4, attempts = attempts + 1
 WHERE (status || '') = 'scheduled'
   AND id = ANY(ARRAY(SELECT id FROM engagement_outbox
                       WHERE status = 'scheduled' AND channel = $5 AND due_at <= $6
                       ORDER BY due_at LIMIT $7))
RETURNING id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
          due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at;

-- name: claim_unknown_channels
-- Claims due rows whose channel is none of `known` (a JSON array of channel
-- names): rows for a channel this instance does not have, to be ended with
-- the reason.
-- binds: token, instance, now, now, now, known, limit
UPDATE engagement_outbox
   SET status = 'sending', claim_token = $1, claimed_by = $2, claimed_at = $3, updated_at = $4, attempts = attempts + 1
 WHERE (status || '') = 'scheduled'
   AND id = ANY(ARRAY(SELECT id FROM engagement_outbox
                       WHERE status = 'scheduled' AND due_at <= $5
                         AND channel NOT IN (SELECT jsonb_array_elements_text(CAST($6 AS jsonb)))
                       ORDER BY due_at LIMIT $7))
RETURNING id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
          due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at;

-- name: peek_channel
-- One channel's due rows, oldest due first, without claiming them: due from
-- `from_due` to `now`, leaving out `exclude` (a JSON array of ids this
-- instance is still recording).
-- binds: channel, from_due, now, exclude, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox
 WHERE status = 'scheduled' AND channel = $1 AND due_at >= $2 AND due_at <= $3
   AND id NOT IN (SELECT jsonb_array_elements_text(CAST($4 AS jsonb)))
 ORDER BY due_at LIMIT $5;

-- name: next_due_for_channel
-- The earliest due time of one channel's scheduled rows.
-- binds: channel
SELECT MIN(due_at) FROM engagement_outbox WHERE status = 'scheduled' AND channel = $1;

-- name: next_due
-- The earliest due time of all scheduled rows: how long the worker may sleep.
-- binds:
SELECT MIN(due_at) FROM engagement_outbox WHERE status = 'scheduled';

-- name: release_claims
-- Gives claims back unfinished (shutdown): `claims` is a JSON array of
-- [id, token] rows (`ClaimRef`); `refund` is 1 to give the attempt back, 0 to keep it.
-- binds: claims, refund, now
UPDATE engagement_outbox AS o
   SET status = 'scheduled', attempts = attempts - $2, claim_token = NULL, claimed_at = NULL, updated_at = $3
  FROM (SELECT r ->> 0 AS id,
               r ->> 1 AS token
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS c
 WHERE o.id = c.id AND o.claim_token = c.token AND (o.status || '') = 'sending';

-- name: reclaim_stale
-- Takes back claims made before `cutoff`: their owner died or stalled. Served
-- by the status index (few rows are ever 'sending'), whose predicate
-- `status <> 'sent'` is repeated so a generic plan can use it.
-- binds: detail, now, cutoff
UPDATE engagement_outbox
   SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, last_error = $1, updated_at = $2
 WHERE status = 'sending' AND status <> 'sent' AND claimed_at < $3;

-- ------------------------------------------------------- what an operator reads

-- name: count_by_status
-- Outbox rows by status, for `herald status`.
-- binds:
SELECT status, COUNT(*) FROM engagement_outbox GROUP BY status;

-- name: oldest_due
-- The row that has waited longest past its due time.
-- binds: now
SELECT id, user_id, channel, due_at, attempts, last_error FROM engagement_outbox
 WHERE status = 'scheduled' AND due_at <= $1 ORDER BY due_at LIMIT 1;

-- name: get_outbox
-- One outbox row by id.
-- binds: id
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE id = $1;

-- name: sends_for_user
-- "Did X get it": a user's send log, newest first.
-- binds: user_id, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at, provider_id
  FROM engagement_sends WHERE user_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2;

-- name: sends_for_outbox
-- One outbox row's send log, oldest first.
-- binds: outbox_id
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at, provider_id
  FROM engagement_sends WHERE outbox_id = $1 ORDER BY created_at, id;

-- name: pending_for_user
-- A user's rows still waiting (scheduled or being delivered), newest first.
-- binds: user_id, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE user_id = $1 AND status IN ('scheduled', 'sending') ORDER BY id DESC LIMIT $2;

-- name: inbox_for_user
-- A user's inbox, newest first (in commit order).
-- binds: user_id, limit
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox WHERE user_id = $1 ORDER BY position DESC LIMIT $2;

-- name: database_time
-- The database's clock in milliseconds: the one "now" every instance agrees
-- on (clock_timestamp, not now(): the time of the call, not of the
-- transaction's start).
-- binds:
SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);

-- ---------------------------------------------------------- the outbox insert

-- name: insert_outbox
-- Inserts outbox rows, skipping any whose dedupe key exists, and returns the
-- ids written: `rows` is a JSON array of rows, each an array of
-- `OutboxJson`'s fields in order
-- (src/store/outbox.rs).
-- binds: rows, now
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT r.id, r.dedupe_key, r.rule_id, r.trigger_id, r.user_id, r.channel, r.payload, 'scheduled',
       r.due_at, r.expires_at, r.follow_up_at, 0, $2, $2
  FROM (SELECT r ->> 0 AS id,
               r ->> 1 AS dedupe_key,
               r ->> 2 AS rule_id,
               r ->> 3 AS trigger_id,
               r ->> 4 AS user_id,
               r ->> 5 AS channel,
               r ->> 6 AS payload,
               CAST(r ->> 7 AS bigint) AS due_at,
               CAST(r ->> 8 AS bigint) AS expires_at,
               CAST(r ->> 9 AS bigint) AS follow_up_at
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS r
    ON CONFLICT (dedupe_key) DO NOTHING RETURNING id;

-- ---------------------------------------------------------------- cancelling
--
-- One compare-and-set per scope: a row a worker claimed meanwhile is no
-- longer 'scheduled' and is the worker's to finish. The cancelled rows come
-- back for their send-log rows and events (`RETURNING`).

-- name: cancel_scheduled_rule
-- Cancels a rule's scheduled rows, `detail` saying why.
-- binds: detail, now, rule_id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = $1, claim_token = NULL, updated_at = $2
 WHERE rule_id = $3 AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;

-- name: cancel_scheduled_user
-- Cancels a user's scheduled rows, `detail` saying why.
-- binds: detail, now, user_id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = $1, claim_token = NULL, updated_at = $2
 WHERE user_id = $3 AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;

-- name: cancel_scheduled_row
-- Cancels one row's scheduled rows, `detail` saying why.
-- binds: detail, now, id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = $1, claim_token = NULL, updated_at = $2
 WHERE id = $3 AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;
