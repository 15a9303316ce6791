-- Herald's statements on SQLite: the outbox: the claim, what an operator reads, the insert,
-- cancelling.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ---------------------------------------------------------------- the claim

-- name: claim_channel
-- Claims up to `limit` of one channel's due rows, oldest due first, for this
-- instance under `token`, and counts the attempt. The subquery picks the
-- candidates; the outer `status = 'scheduled'` is the compare-and-set (one
-- writer at a time: each row goes to one claim).
-- binds: token, instance, now, now, channel, now, limit
UPDATE engagement_outbox
   SET status = 'sending', claim_token = ?, claimed_by = ?, claimed_at = ?, updated_at = ?, attempts = attempts + 1
 WHERE status = 'scheduled'
   AND id IN (SELECT id FROM engagement_outbox INDEXED BY engagement_outbox_due_channel
               WHERE status = 'scheduled' AND channel = ? AND due_at <= ?
               ORDER BY due_at LIMIT ?)
RETURNING id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
          due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at;

-- name: claim_unknown_channels
-- Claims due rows whose channel is none of `known` (a JSON array of channel
-- names): rows for a channel this instance does not have, to be ended with
-- the reason.
-- binds: token, instance, now, now, now, known, limit
UPDATE engagement_outbox
   SET status = 'sending', claim_token = ?, claimed_by = ?, claimed_at = ?, updated_at = ?, attempts = attempts + 1
 WHERE status = 'scheduled'
   AND id IN (SELECT id FROM engagement_outbox INDEXED BY engagement_outbox_due
               WHERE status = 'scheduled' AND due_at <= ?
                 AND channel NOT IN (SELECT value FROM json_each(?))
               ORDER BY due_at LIMIT ?)
RETURNING id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
          due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at;

-- name: peek_channel
-- One channel's due rows, oldest due first, without claiming them: due from
-- `from_due` to `now`, leaving out `exclude` (a JSON array of ids this
-- instance is still recording).
-- binds: channel, from_due, now, exclude, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox INDEXED BY engagement_outbox_due_channel
 WHERE status = 'scheduled' AND channel = ? AND due_at >= ? AND due_at <= ?
   AND id NOT IN (SELECT value FROM json_each(?))
 ORDER BY due_at LIMIT ?;

-- name: next_due_for_channel
-- The earliest due time of one channel's scheduled rows.
-- binds: channel
SELECT MIN(due_at) FROM engagement_outbox INDEXED BY engagement_outbox_due_channel
 WHERE status = 'scheduled' AND channel = ?;

-- name: next_due
-- The earliest due time of all scheduled rows: how long the worker may sleep.
-- binds:
SELECT MIN(due_at) FROM engagement_outbox INDEXED BY engagement_outbox_due WHERE status = 'scheduled';

-- name: release_claims
-- Gives claims back unfinished (shutdown): `claims` is a JSON array of
-- [id, token] rows (`ClaimRef`); `refund` is 1 to give the attempt back, 0 to keep it.
-- binds: claims, refund, now
UPDATE engagement_outbox AS o
   SET status = 'scheduled', attempts = attempts - ?2, claim_token = NULL, claimed_at = NULL, updated_at = ?3
  FROM (SELECT value ->> 0 AS id, value ->> 1 AS token FROM json_each(?1)) AS c
 WHERE o.id = c.id AND o.claim_token = c.token AND o.status = 'sending';

-- ------------------------------------------------------- what an operator reads

-- name: oldest_due
-- The row that has waited longest past its due time.
-- binds: now
SELECT id, user_id, channel, due_at, attempts, last_error FROM engagement_outbox INDEXED BY engagement_outbox_due
 WHERE status = 'scheduled' AND due_at <= ? ORDER BY due_at LIMIT 1;

-- name: database_time
-- The database's clock in milliseconds: the one "now" every instance agrees on.
-- binds:
SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER);

-- ---------------------------------------------------------- the outbox insert

-- name: insert_outbox_values
-- Inserts outbox rows, skipping any whose dedupe key exists, and returns the
-- ids written; one tuple per row as in append_sends_values.
-- binds: id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, due_at, expires_at, follow_up_at, created_at, updated_at
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
SELECT * FROM (VALUES (?, ?, ?, ?, ?, ?, ?, 'scheduled', ?, ?, ?, 0, ?, ?) /* each row */) WHERE column1 IS NOT NULL
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
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE rule_id = ? AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;

-- name: cancel_scheduled_user
-- Cancels a user's scheduled rows, `detail` saying why.
-- binds: detail, now, user_id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE user_id = ? AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;

-- name: cancel_scheduled_row
-- Cancels one row's scheduled rows, `detail` saying why.
-- binds: detail, now, id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE id = ? AND status = 'scheduled'
RETURNING id, rule_id, trigger_id, user_id, channel, attempts;
