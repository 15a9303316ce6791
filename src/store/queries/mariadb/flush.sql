-- Herald's statements on MariaDB and MySQL: a flush: outcomes in sets.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

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
-- binds: id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, provider_id, created_at
INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash,
                              status, detail, attempts, provider_id, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) /* each row */;

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
