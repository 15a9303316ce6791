-- Herald's statements on MariaDB and MySQL, by name (see
-- src/store/queries/mod.rs). Each block: `-- name:`, what it is for,
-- `-- binds:` (the values the code binds, in order: the same list in
-- sqlite.sql and postgres.sql), then the statement as MariaDB receives it.
--
-- No `UPDATE … RETURNING` here: a claim marks its rows with its token and
-- reads them back by it (claimed_by_token).
--
-- A JSON parameter is read with JSON_TABLE (MariaDB 10.6+, MySQL 8): a list
-- of keys is an array of strings (PATH '$'), rows are arrays, each a Rust
-- struct's fields in order (see `json_rows::row_as_array`), read by position
-- and named by the COLUMNS list. Keys are VARCHARs in the tables' binary collation, so a join on them
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
-- [id, token] rows (`ClaimRef`); `refund` is 1 to give the attempt back, 0 to keep it.
-- binds: claims, refund, now
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         token VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
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

-- ------------------------------------------------ a flush: outcomes in sets
--
-- One flush of the worker's outcomes is one transaction of these statements:
-- record_claimed / record_unclaimed (behind a savepoint, with lock_claimed /
-- lock_unclaimed when a fence failed), append_sends_values,
-- reserve_positions and newest_position, append_events_values,
-- insert_inbox_values.

-- name: record_claimed
-- The fenced update of rows still claimed: `changes` is a JSON array of
-- rows, each an array of `Change`'s fields in order
-- (src/store/outcomes.rs); a row whose token changed or that is no longer 'sending' is left alone. MariaDB applies SET
-- items left to right, so no item reads a column an earlier one wrote. A
-- retry clears claimed_at; a finished row keeps when its last attempt
-- started.
-- binds: changes, now
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         token VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
         status VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
         last_error LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
         due_at BIGINT PATH '$[5]',
         add_attempt BIGINT PATH '$[6]',
         expires_at BIGINT PATH '$[7]')) AS c
  STRAIGHT_JOIN engagement_outbox o ON o.id = c.id AND o.claim_token = c.token AND o.status = 'sending'
   SET o.status = c.status, o.last_error = c.last_error, o.due_at = COALESCE(c.due_at, o.due_at),
       o.expires_at = COALESCE(c.expires_at, o.expires_at),
       o.claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, o.claim_token = NULL,
       o.attempts = o.attempts + c.add_attempt, o.updated_at = ?;

-- name: record_unclaimed
-- record_claimed for rows never claimed (read with peek_channel): the fence
-- is the row's `updated_at` as it was read ("version") and its status still
-- 'scheduled'.
-- binds: changes, now
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         version BIGINT PATH '$[2]',
         status VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
         last_error LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
         due_at BIGINT PATH '$[5]',
         add_attempt BIGINT PATH '$[6]',
         expires_at BIGINT PATH '$[7]')) AS c
  STRAIGHT_JOIN engagement_outbox o ON o.id = c.id AND o.updated_at = c.version AND o.status = 'scheduled'
   SET o.status = c.status, o.last_error = c.last_error, o.due_at = COALESCE(c.due_at, o.due_at),
       o.expires_at = COALESCE(c.expires_at, o.expires_at),
       o.claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, o.claim_token = NULL,
       o.attempts = o.attempts + c.add_attempt, o.updated_at = ?;

-- name: lock_claimed
-- The rows record_claimed may change, locked: after the update matched fewer
-- rows than it was given, it is undone to a savepoint, these are locked, and
-- it runs again; these are the rows it wrote.
-- binds: changes
SELECT o.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         token VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
  STRAIGHT_JOIN engagement_outbox o ON o.id = c.id AND o.claim_token = c.token AND o.status = 'sending'
   FOR UPDATE;

-- name: lock_unclaimed
-- lock_claimed for record_unclaimed.
-- binds: changes
SELECT o.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         version BIGINT PATH '$[2]')) AS c
  STRAIGHT_JOIN engagement_outbox o ON o.id = c.id AND o.updated_at = c.version AND o.status = 'scheduled'
   FOR UPDATE;

-- name: append_sends_values
-- Appends send-log rows. The tuple before `/* each row */` is repeated once
-- per row (src/store/values.rs): multi-row VALUES, because reading a JSON
-- parameter with JSON_TABLE cost MariaDB three times the server time.
-- binds: id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash,
                              status, detail, attempts, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) /* each row */;

-- name: append_events_values
-- Appends events at positions the transaction reserved (reserve_positions),
-- one tuple per row as in append_sends_values.
-- binds: id, position, kind, user_id, outbox_id, payload, created_at
INSERT INTO engagement_events (id, position, kind, user_id, outbox_id, payload, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?) /* each row */;

-- name: insert_inbox_values
-- Writes inbox messages at reserved positions, one tuple per row as in
-- append_sends_values; a message whose outbox row already has one is
-- skipped (a no-op update, not INSERT IGNORE, which would also swallow
-- truncation and other errors).
-- binds: id, position, outbox_id, user_id, title, body, url, data, created_at
INSERT INTO engagement_inbox (id, position, outbox_id, user_id, title, body, url, data, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) /* each row */
    ON DUPLICATE KEY UPDATE outbox_id = outbox_id;

-- name: reserve_positions
-- Takes `count` positions from the counter shared by events and inbox
-- messages; the row lock keeps every other writer of positions waiting until
-- this transaction commits (src/store/positions.rs). No RETURNING: the last
-- is read back with newest_position, the row being this transaction's.
-- binds: count
UPDATE engagement_sequences SET last = last + ? WHERE name = 'stream';

-- name: newest_position
-- The newest position of a committed transaction (or, after
-- reserve_positions, of this one).
-- binds:
SELECT last FROM engagement_sequences WHERE name = 'stream';

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

-- ------------------------------------------------------------------ triggers

-- name: insert_trigger
-- Records one trigger; one whose idempotency key exists is skipped (a no-op
-- update; the caller reads back which trigger holds the key).
-- binds: id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key;

-- name: trigger_by_idempotency_key
-- The trigger that holds an idempotency key.
-- binds: idempotency_key
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE idempotency_key = ?;

-- name: accept_triggers
-- Records a batch of triggers planned in the same transaction (the API's
-- path): `triggers` is a JSON array of rows, each an array of
-- `TriggerJson`'s fields in order
-- (src/store/triggers.rs). A trigger whose idempotency key exists is skipped
-- (a no-op update); MariaDB cannot say which, so the caller reads the
-- holders of the keys back (triggers_by_idempotency_keys).
-- binds: now, now, triggers
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at,
                                 created_at, planned_at, planned_count, plan_detail)
SELECT t.id, t.type, t.user_id, t.payload, t.idempotency_key, t.request_hash, t.occurred_at, ?, ?,
       t.planned_count, t.plan_detail
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
         user_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
         payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
         idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
         request_hash VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]',
         occurred_at BIGINT PATH '$[6]',
         planned_count BIGINT PATH '$[7]',
         plan_detail LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[8]')) AS t
    ON DUPLICATE KEY UPDATE idempotency_key = engagement_triggers.idempotency_key;

-- name: triggers_by_idempotency_keys
-- The triggers that hold these idempotency keys (a JSON array of strings).
-- binds: keys
SELECT h.id, h.type, h.user_id, h.payload, h.idempotency_key, h.request_hash, h.occurred_at, h.created_at,
       h.planned_at, h.planned_count, h.plan_detail
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers h ON h.idempotency_key = wanted.k;

-- name: lock_unplanned
-- The triggers plan_triggers will mark (no RETURNING here), locked first:
-- `plans` as in plan_triggers.
-- binds: plans
SELECT t.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]')) AS p
  STRAIGHT_JOIN engagement_triggers t ON t.id = p.id
 WHERE t.planned_at IS NULL
   FOR UPDATE;

-- name: plan_triggers
-- Marks triggers planned, by compare-and-set on planned_at (which planner
-- owns each trigger; the loser writes nothing for it): `plans` is a JSON
-- array of [id, planned_count, plan_detail] rows (`PlanJson`). The rows won are those
-- lock_unplanned returned.
-- binds: plans, now
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
         id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
         planned_count BIGINT PATH '$[1]',
         plan_detail LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS p
  STRAIGHT_JOIN engagement_triggers t ON t.id = p.id
   SET t.planned_at = ?, t.planned_count = p.planned_count, t.plan_detail = p.plan_detail
 WHERE t.planned_at IS NULL;

-- name: get_trigger
-- One trigger by id.
-- binds: id
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE id = ?;

-- name: trigger_times
-- When these triggers (a JSON array of ids) happened.
-- binds: ids
SELECT t.id, t.occurred_at
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers t ON t.id = wanted.k;

-- name: recorded_triggers
-- Which of these trigger ids (a JSON array of strings) are recorded, on a
-- MySQL server (or a MariaDB that refused recorded_triggers_synced).
-- binds: ids
SELECT t.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers t ON t.id = wanted.k;

-- name: recorded_triggers_synced
-- recorded_triggers after this Galera node has applied every write the
-- cluster committed before it (wsrep_sync_wait, MariaDB's per-statement
-- variable; without effect on a server that is not a Galera node).
-- binds: ids
SET STATEMENT wsrep_sync_wait = 1 FOR
SELECT t.id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_triggers t ON t.id = wanted.k;

-- name: unplanned_triggers
-- Triggers the planner has not planned yet, oldest first.
-- binds: limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE planned_at IS NULL ORDER BY created_at LIMIT ?;

-- name: outbox_for_trigger
-- The outbox rows planned from one trigger.
-- binds: trigger_id
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE trigger_id = ? ORDER BY id;

-- name: recent_triggers
-- The most recent triggers of a type, newest first (rule previews).
-- binds: type, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE type = ? ORDER BY created_at DESC LIMIT ?;

-- name: triggers_for_user
-- A user's triggers, newest first.
-- binds: user_id, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE user_id = ? ORDER BY created_at DESC LIMIT ?;


-- -------------------------------------------------------------------- events

-- name: events_after
-- Events after a position, oldest first: what a follower reads.
-- binds: position, limit
SELECT id, position, kind, user_id, outbox_id, payload, created_at FROM engagement_events
 WHERE position > ? ORDER BY position LIMIT ?;

-- name: latest_event_position
-- The newest event's position (NULL when there is none).
-- binds:
SELECT MAX(position) AS p FROM engagement_events;

-- name: event_position
-- The position of one event, for a follower that resumes with an event id.
-- binds: id
SELECT position FROM engagement_events WHERE id = ?;


-- --------------------------------------------------------------------- inbox

-- name: inbox_after
-- A user's messages after a position, oldest first: the live stream.
-- binds: user_id, position, limit
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox WHERE user_id = ? AND position > ? ORDER BY position LIMIT ?;

-- name: inbox_latest_position
-- A user's newest message's position (NULL when there is none).
-- binds: user_id
SELECT MAX(position) AS p FROM engagement_inbox WHERE user_id = ?;

-- name: inbox_resume_position
-- Where a stream resumes for a client of an older version, which sent a
-- message id: ids are UUIDv7, so the messages created after it are the ones
-- it has not seen.
-- binds: user_id, id, id
SELECT MAX(position) AS p FROM engagement_inbox WHERE user_id = ? AND (id = ? OR id < ?);

-- name: inbox_counts
-- A user's badge counts. COUNT of a CASE, not SUM: SUM is DECIMAL on MariaDB
-- and NUMERIC on PostgreSQL, which sqlx's Any driver cannot carry.
-- binds: user_id
SELECT COUNT(CASE WHEN seen_at IS NULL THEN 1 END) AS unseen,
       COUNT(CASE WHEN read_at IS NULL THEN 1 END) AS unread
  FROM engagement_inbox WHERE user_id = ? AND archived_at IS NULL;

-- name: inbox_mark_seen
-- Marks one of a user's messages seen. Each inbox_mark_* takes `now` twice
-- (not `seen_at = read_at`: MariaDB evaluates SET left to right with new
-- values, the others with old ones).
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET seen_at = COALESCE(seen_at, ?, ?) WHERE id = ? AND user_id = ?;

-- name: inbox_mark_read
-- Marks one of a user's messages read, and so seen.
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET read_at = COALESCE(read_at, ?), seen_at = COALESCE(seen_at, ?)
 WHERE id = ? AND user_id = ?;

-- name: inbox_mark_unread
-- Marks one of a user's messages unread (it stays seen).
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET read_at = NULL, seen_at = COALESCE(seen_at, ?, ?) WHERE id = ? AND user_id = ?;

-- name: inbox_archive
-- Archives one of a user's messages, and so marks it seen.
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET archived_at = COALESCE(archived_at, ?), seen_at = COALESCE(seen_at, ?)
 WHERE id = ? AND user_id = ?;

-- name: inbox_message
-- One of a user's messages (scoped by user: a token never reads another's).
-- binds: id, user_id
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox WHERE id = ? AND user_id = ?;

-- name: inbox_read_all
-- Marks every unarchived unread message of a user read.
-- binds: now, now, user_id
UPDATE engagement_inbox SET read_at = ?, seen_at = COALESCE(seen_at, ?)
 WHERE user_id = ? AND read_at IS NULL AND archived_at IS NULL;


-- ----------------------------------------------------------------- instances

-- name: end_lease
-- Gives an instance's lease up (a clean shutdown).
-- binds: id
DELETE FROM engagement_instances WHERE id = ?;

-- name: rescue_lapsed
-- Takes back `sending` rows claimed before `cutoff` by an instance whose
-- lease was not valid at `cutoff`. `status = 'sending'` first: the status
-- index (whose predicate, `status <> 'sent'`, is repeated for SQLite and
-- PostgreSQL's generic plans) finds the few rows in flight; the lease is
-- looked up per row by primary key.
-- binds: detail, now, cutoff, cutoff
UPDATE engagement_outbox
   SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, last_error = ?, updated_at = ?
 WHERE status = 'sending' AND status <> 'sent' AND claimed_by IS NOT NULL AND claimed_at < ?
   AND NOT EXISTS (SELECT 1 FROM engagement_instances i
                    WHERE i.id = engagement_outbox.claimed_by AND i.expires_at >= ?);

-- name: forget_lapsed_instances
-- Forgets instance rows whose lease lapsed before `cutoff`.
-- binds: cutoff
DELETE FROM engagement_instances WHERE expires_at < ?;

-- name: list_instances
-- Every instance row, newest lease first.
-- binds:
SELECT id, host, pid, started_at, renewed_at, expires_at FROM engagement_instances ORDER BY expires_at DESC;

-- name: renew_lease
-- Takes or renews an instance's lease.
-- binds: id, host, pid, started_at, renewed_at, expires_at
INSERT INTO engagement_instances (id, host, pid, started_at, renewed_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE renewed_at = VALUES(renewed_at), expires_at = VALUES(expires_at);


-- ------------------------------------------------------------------- digests

-- name: digest_items
-- The items of these digest messages (a JSON array of outbox ids), in the
-- order they happened.
-- binds: outbox_ids
SELECT i.outbox_id, i.trigger_id, i.payload, i.occurred_at
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_digest_items i ON i.outbox_id = wanted.k
 ORDER BY i.outbox_id, i.occurred_at, i.trigger_id;

-- name: digests_of_trigger
-- The digests a trigger is in, with each one's item count.
-- binds: trigger_id
SELECT i.outbox_id, i.rule_id, o.channel, o.status, o.due_at,
       (SELECT COUNT(*) FROM engagement_digest_items c WHERE c.outbox_id = i.outbox_id) AS items
  FROM engagement_digest_items i JOIN engagement_outbox o ON o.id = i.outbox_id
 WHERE i.trigger_id = ? ORDER BY i.rule_id;

-- name: digest_item_of_rule
-- Whether a trigger is already in a digest of this rule.
-- binds: trigger_id, rule_id
SELECT outbox_id FROM engagement_digest_items WHERE trigger_id = ? AND rule_id = ?;

-- name: create_digest_bucket
-- Makes a bucket's row if it has none (an empty one: no digest open).
-- binds: bucket
INSERT INTO engagement_digests (bucket, outbox_id, opened_at, items) VALUES (?, '', 0, 0)
    ON DUPLICATE KEY UPDATE bucket = bucket;

-- name: read_digest_bucket
-- A bucket's open digest, locked for this transaction (SQLite: the one
-- writer holds the database).
-- binds: bucket
SELECT outbox_id, opened_at, items FROM engagement_digests WHERE bucket = ? FOR UPDATE;

-- name: join_digest
-- The compare-and-set that decides whether the open digest is still open:
-- it moves updated_at (by at least 1 ms, whatever the clock says) so a
-- reader of the row's old version loses; `closing` (1 or 0) brings its due
-- time forward to now when this item fills it.
-- binds: now, now, closing, now, now, outbox_id
UPDATE engagement_outbox
   SET updated_at = CASE WHEN updated_at >= ? THEN updated_at + 1 ELSE ? END,
       due_at = CASE WHEN ? = 1 AND due_at > ? THEN ? ELSE due_at END
 WHERE id = ? AND status = 'scheduled';

-- name: count_digest_item
-- Counts an item into its bucket's open digest.
-- binds: bucket
UPDATE engagement_digests SET items = items + 1 WHERE bucket = ?;

-- name: open_digest
-- Opens a bucket's next digest with its first item.
-- binds: outbox_id, opened_at, bucket
UPDATE engagement_digests SET outbox_id = ?, opened_at = ?, items = 1 WHERE bucket = ?;

-- name: insert_digest_item
-- Adds a trigger to a digest message.
-- binds: trigger_id, rule_id, outbox_id, user_id, payload, occurred_at, created_at
INSERT INTO engagement_digest_items (trigger_id, rule_id, outbox_id, user_id, payload, occurred_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?);


-- ---------------------------------------------------------------- escalation

-- name: original_states
-- What became of the originals of escalations (a JSON array of outbox ids):
-- status, and when the inbox message was delivered, seen and read.
-- binds: outbox_ids
SELECT o.id, o.status, i.created_at AS delivered_at, i.seen_at, i.read_at
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_outbox o ON o.id = wanted.k
  LEFT JOIN engagement_inbox i ON i.outbox_id = o.id;

-- name: due_follow_ups
-- Messages whose escalation's follow-up is due, earliest first.
-- binds: now, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at, follow_up_at
  FROM engagement_outbox WHERE follow_up_at <= ? ORDER BY follow_up_at LIMIT ?;

-- name: clear_follow_ups
-- Marks these originals' follow-ups planned (a JSON array of outbox ids).
-- binds: outbox_ids
UPDATE engagement_outbox SET follow_up_at = NULL
 WHERE id IN (SELECT done.k FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS done);


-- --------------------------------------------------------------------- rules

-- name: insert_rule
-- Adds a rule.
-- binds: id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at
INSERT INTO engagement_rules (id, name, trigger_type, condition_expr, channel, template, delay_seconds,
                              grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_rule
-- One rule.
-- binds: id
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules WHERE id = ?;

-- name: list_rules
-- Every rule, oldest first.
-- binds:
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules ORDER BY created_at, id;

-- name: update_rule
-- Replaces every column of a rule but its id and created_at.
-- binds: name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds, category, enabled, webhook_url, workflow, updated_at, id
UPDATE engagement_rules
   SET name = ?, trigger_type = ?, condition_expr = ?, channel = ?, template = ?, delay_seconds = ?,
       grace_seconds = ?, category = ?, enabled = ?, webhook_url = ?, workflow = ?, updated_at = ?
 WHERE id = ?;

-- name: delete_rule
-- Deletes a rule.
-- binds: id
DELETE FROM engagement_rules WHERE id = ?;

-- name: enabled_rules
-- Every enabled rule: what the planner's cache holds.
-- binds:
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules WHERE enabled = 1 ORDER BY created_at, id;

-- name: rule_versions
-- (id, enabled, updated_at) of these rules (a JSON array of ids): whether
-- the worker's cached copies are current and still enabled.
-- binds: ids
SELECT r.id, r.enabled, r.updated_at
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_rules r ON r.id = wanted.k;

-- name: rules_by_ids
-- These rules (a JSON array of ids), those that exist.
-- binds: ids
SELECT r.id, r.name, r.trigger_type, r.condition_expr, r.channel, r.template, r.delay_seconds, r.grace_seconds,
       r.category, r.enabled, r.webhook_url, r.workflow, r.created_at, r.updated_at
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_rules r ON r.id = wanted.k;



-- -------------------------------------------------------------- suppressions

-- name: insert_suppression
-- Suppresses an address for a category ('*': all), unless it already is
-- (the caller then replaces it where it should).
-- binds: address_hash, category, reason, detail, created_at, expires_at
INSERT INTO engagement_suppressions (address_hash, category, reason, detail, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE address_hash = address_hash;

-- name: find_suppression
-- The suppression in force for an address and a category, or for all
-- categories ('*' sorts before letters, so that one is reported when both
-- exist).
-- binds: address_hash, all_categories, category, now
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = ? AND category IN (?, ?) AND (expires_at IS NULL OR expires_at > ?)
 ORDER BY category LIMIT 1;

-- name: suppressions_of_address
-- An address's suppressions.
-- binds: address_hash, limit
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = ? ORDER BY category LIMIT ?;

-- name: list_suppressions
-- The newest suppressions.
-- binds: limit
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 ORDER BY created_at DESC, address_hash LIMIT ?;

-- name: sends_for_address
-- The send log for one address hash, newest first (served by
-- engagement_sends_address).
-- binds: address_hash, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
  FROM engagement_sends WHERE address_hash = ? ORDER BY created_at DESC, id DESC LIMIT ?;

-- name: outbox_by_dedupe_keys
-- Which rows hold these dedupe keys (a JSON array of strings): after an
-- insert that skipped some (MariaDB cannot say which), what became of each.
-- binds: keys
SELECT o.id, o.dedupe_key
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_outbox o ON o.dedupe_key = wanted.k;


-- ------------------------------------------------------------------ api keys

-- name: insert_api_key
-- Adds an API key (its hash, never the key).
-- binds: id, name, key_hash, prefix, created_at, revoked_at
INSERT INTO engagement_api_keys (id, name, key_hash, prefix, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?);

-- name: api_key_by_hash
-- The key a request presents, by its hash: every API call's authentication.
-- binds: key_hash
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys WHERE key_hash = ?;

-- name: list_api_keys
-- Every API key, oldest first.
-- binds:
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys ORDER BY created_at, id;

-- name: revoke_api_key
-- Revokes a key (once: a revoked key keeps when it was revoked).
-- binds: now, id
UPDATE engagement_api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL;
