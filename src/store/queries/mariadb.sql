-- Herald's statements on MariaDB and MySQL, by name (see
-- src/store/queries/mod.rs). Each block: `-- name:`, what it is for,
-- `-- binds:` (the values the code binds, in order: the same list in
-- sqlite.sql and postgres.sql), then the statement as MariaDB receives it.
--
-- No `UPDATE … RETURNING` here: a claim marks its rows with its token and
-- reads them back by it (claimed_by_token).
--
-- A JSON parameter is read with JSON_TABLE (MariaDB 10.6+, MySQL 8): a list
-- of keys is an array of strings (PATH '$'), rows are objects read by field
-- name. Keys are VARCHARs in the tables' binary collation, so a join on them
-- can use the index; `STRAIGHT_JOIN` reads the JSON first, since the planner
-- cannot tell how many rows it holds and may otherwise scan the table.
--
-- Claim slices (Galera): every node takes writes, and two instances on
-- different nodes that claim the same oldest rows collide at commit. So an
-- instance first claims from its own slice, the rows whose
-- `MOD(CRC32(id), instances) = rank`, and only when that has nothing due
-- from all rows (see `ClaimSlice` in src/store/sql.rs).

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
-- binds: channel, from_due, now, exclude, limit
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
-- {"id", "token"}; `refund` is 1 to give the attempt back, 0 to keep it.
-- binds: claims, refund, now
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.id',
         token VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.token')) AS c
  STRAIGHT_JOIN engagement_outbox o ON o.id = c.id AND o.claim_token = c.token AND o.status = 'sending'
   SET o.status = 'scheduled', o.attempts = o.attempts - ?, o.claim_token = NULL, o.claimed_at = NULL,
       o.updated_at = ?;

-- name: reclaim_stale
-- Takes back claims made before `cutoff`: their owner died or stalled. Served
-- by the status index (few rows are ever 'sending').
-- binds: detail, now, cutoff
UPDATE engagement_outbox
   SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, last_error = ?, updated_at = ?
 WHERE status = 'sending' AND status <> 'sent' AND claimed_at < ?;

-- ------------------------------------------------------- what an operator reads

-- name: count_by_status
-- Outbox rows by status, for `herald status`.
-- binds:
SELECT status, COUNT(*) FROM engagement_outbox GROUP BY status;

-- name: oldest_due
-- The row that has waited longest past its due time.
-- binds: now
SELECT id, user_id, channel, due_at, attempts, last_error FROM engagement_outbox
 WHERE status = 'scheduled' AND due_at <= ? ORDER BY due_at LIMIT 1;

-- name: get_outbox
-- One outbox row by id.
-- binds: id
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE id = ?;

-- name: sends_for_user
-- "Did X get it": a user's send log, newest first.
-- binds: user_id, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
  FROM engagement_sends WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT ?;

-- name: sends_for_outbox
-- One outbox row's send log, oldest first.
-- binds: outbox_id
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
  FROM engagement_sends WHERE outbox_id = ? ORDER BY created_at, id;

-- name: pending_for_user
-- A user's rows still waiting (scheduled or being delivered), newest first.
-- binds: user_id, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE user_id = ? AND status IN ('scheduled', 'sending') ORDER BY id DESC LIMIT ?;

-- name: inbox_for_user
-- A user's inbox, newest first (in commit order).
-- binds: user_id, limit
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox WHERE user_id = ? ORDER BY position DESC LIMIT ?;

-- name: database_time
-- The database's clock in milliseconds: the one "now" every instance agrees
-- on (SYSDATE, not NOW(): the time of the call, not of the statement's start).
-- binds:
SELECT CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED);
