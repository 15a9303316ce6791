-- Herald's statements on MariaDB and MySQL: the outbox: the claim, what an operator reads, the insert,
-- cancelling.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ---------------------------------------------------------------- the claim

-- name: claim_channel
-- Claims up to `limit` of one channel's due rows, oldest due first, for this
-- instance under `token`, and counts the attempt; `status = 'scheduled'` is
-- the compare-and-set. (MariaDB cannot LIMIT a subquery on the table it
-- updates, but a single-table UPDATE may ORDER BY and LIMIT itself.)
-- binds: token, instance, now, now, channel, now, limit
UPDATE engagement_outbox
   SET status = 'sending', claim_token = ?, claimed_by = ?, claimed_at = ?, updated_at = ?, attempts = attempts + 1
 WHERE status = 'scheduled' AND channel = ? AND due_at <= ?
 ORDER BY due_at LIMIT ?;

-- name: claim_channel_slice
-- claim_channel within this instance's slice of the due rows.
-- binds: token, instance, now, now, channel, now, instances, rank, limit
UPDATE engagement_outbox
   SET status = 'sending', claim_token = ?, claimed_by = ?, claimed_at = ?, updated_at = ?, attempts = attempts + 1
 WHERE status = 'scheduled' AND channel = ? AND due_at <= ? AND MOD(CRC32(id), ?) = ?
 ORDER BY due_at LIMIT ?;

-- name: claim_unknown_channels
-- Claims due rows whose channel is none of `known` (a JSON array of channel
-- names): rows for a channel this instance does not have, to be ended with
-- the reason.
-- binds: token, instance, now, now, now, known, limit
UPDATE engagement_outbox
   SET status = 'sending', claim_token = ?, claimed_by = ?, claimed_at = ?, updated_at = ?, attempts = attempts + 1
 WHERE status = 'scheduled' AND due_at <= ?
   AND channel NOT IN (SELECT known.k FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS known)
 ORDER BY due_at LIMIT ?;

-- name: claimed_by_token
-- The rows a claim won, read back by its token.
-- binds: token
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE claim_token = ? AND status = 'sending';

-- name: live_instances
-- The instances whose lease holds, in id order: an instance's rank among
-- them is its slice.
-- binds: now
SELECT id FROM engagement_instances WHERE expires_at >= ? ORDER BY id;

-- name: peek_channel
-- One channel's due rows, oldest due first, without claiming them: due from
-- `from_due` to `now`, leaving out `exclude` (a JSON array of ids this
-- instance is still recording).
-- The exclusion is materialized once (`in_to_exists=off`): left to
-- itself, MariaDB 10.11 chose per read between that and testing each
-- candidate against the whole list, and the latter read 1,000 rows of a
-- fan-out's backlog with 1,000 ids left out in about a second (1.5 million
-- rows examined) instead of 50 ms: every other read of the drain.
-- binds: channel, from_due, now, exclude, limit
SET STATEMENT optimizer_switch = 'in_to_exists=off' FOR
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox
 WHERE status = 'scheduled' AND channel = ? AND due_at >= ? AND due_at <= ?
   AND id NOT IN (SELECT taken.k FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS taken)
 ORDER BY due_at LIMIT ?;

-- name: peek_channel_slice
-- peek_channel within this instance's slice of the due rows.
-- binds: channel, from_due, now, exclude, instances, rank, limit
SET STATEMENT optimizer_switch = 'in_to_exists=off' FOR
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox
 WHERE status = 'scheduled' AND channel = ? AND due_at >= ? AND due_at <= ?
   AND id NOT IN (SELECT taken.k FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS taken)
   AND MOD(CRC32(id), ?) = ?
 ORDER BY due_at LIMIT ?;

-- name: next_due_for_channel
-- The earliest due time of one channel's scheduled rows.
-- binds: channel
SELECT MIN(due_at) FROM engagement_outbox WHERE status = 'scheduled' AND channel = ?;

-- name: next_due
-- The earliest due time of all scheduled rows: how long the worker may sleep.
-- binds:
SELECT MIN(due_at) FROM engagement_outbox WHERE status = 'scheduled';

-- name: release_claims
-- Gives claims back unfinished (shutdown): `claims` is a JSON array of
-- [id, token] rows (`ClaimRef`); `refund` is 1 to give the attempt back, 0 to keep it.
-- binds: claims, refund, now
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         token VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
  STRAIGHT_JOIN engagement_outbox o ON o.id = c.id AND o.claim_token = c.token AND o.status = 'sending'
   SET o.status = 'scheduled', o.attempts = o.attempts - ?, o.claim_token = NULL, o.claimed_at = NULL,
       o.updated_at = ?;

-- ------------------------------------------------------- what an operator reads

-- name: oldest_due
-- The row that has waited longest past its due time.
-- binds: now
SELECT id, user_id, channel, due_at, attempts, last_error FROM engagement_outbox
 WHERE status = 'scheduled' AND due_at <= ? ORDER BY due_at LIMIT 1;

-- name: database_time
-- The database's clock in milliseconds: the one "now" every instance agrees
-- on (SYSDATE, not NOW(): the time of the call, not of the statement's start).
-- binds:
SELECT CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED);

-- ---------------------------------------------------------- the outbox insert

-- name: insert_outbox_values
-- Inserts outbox rows, one tuple per row as in append_sends_values,
-- skipping any whose dedupe key exists (a no-op update). MariaDB cannot say
-- which rows it skipped: the caller reads the holders of the keys back.
-- binds: id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, due_at, expires_at, follow_up_at, created_at, updated_at
INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
                               due_at, expires_at, follow_up_at, attempts, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, 'scheduled', ?, ?, ?, 0, ?, ?) /* each row */
    ON DUPLICATE KEY UPDATE dedupe_key = engagement_outbox.dedupe_key;

-- ---------------------------------------------------------------- cancelling
--
-- One compare-and-set per scope: a row a worker claimed meanwhile is no
-- longer 'scheduled' and is the worker's to finish. The cancelled rows come
-- back for their send-log rows and events: MariaDB has no `UPDATE … RETURNING`,
-- so it locks them first (lock_scheduled_*), and the update then changes
-- exactly the rows read.

-- name: cancel_scheduled_rule
-- Cancels a rule's scheduled rows, `detail` saying why.
-- binds: detail, now, rule_id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE rule_id = ? AND status = 'scheduled';

-- name: lock_scheduled_rule
-- Locks a rule's scheduled rows for cancel_scheduled_rule, and reads them.
-- binds: rule_id
SELECT id, rule_id, trigger_id, user_id, channel, attempts
  FROM engagement_outbox WHERE rule_id = ? AND status = 'scheduled' FOR UPDATE;

-- name: cancel_scheduled_user
-- Cancels a user's scheduled rows, `detail` saying why.
-- binds: detail, now, user_id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE user_id = ? AND status = 'scheduled';

-- name: lock_scheduled_user
-- Locks a user's scheduled rows for cancel_scheduled_user, and reads them.
-- binds: user_id
SELECT id, rule_id, trigger_id, user_id, channel, attempts
  FROM engagement_outbox WHERE user_id = ? AND status = 'scheduled' FOR UPDATE;

-- name: cancel_scheduled_row
-- Cancels one row's scheduled rows, `detail` saying why.
-- binds: detail, now, id
UPDATE engagement_outbox
   SET status = 'cancelled', last_error = ?, claim_token = NULL, updated_at = ?
 WHERE id = ? AND status = 'scheduled';

-- name: lock_scheduled_row
-- Locks one row's scheduled rows for cancel_scheduled_row, and reads them.
-- binds: id
SELECT id, rule_id, trigger_id, user_id, channel, attempts
  FROM engagement_outbox WHERE id = ? AND status = 'scheduled' FOR UPDATE;
