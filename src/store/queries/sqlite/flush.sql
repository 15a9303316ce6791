-- Herald's statements on SQLite: a flush: outcomes in sets.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ------------------------------------------------ a flush: outcomes in sets
--
-- One flush of the worker's outcomes is one transaction of these statements:
-- record_claimed_values / record_unclaimed_values, append_sends_values, reserve_positions,
-- append_events_values, insert_inbox_values.

-- name: record_claimed_values
-- The fenced update of rows still claimed: one `(id, token, status,
-- last_error, due_at, add_attempt, expires_at)` tuple per row (see `Change`
-- in src/store/outcomes.rs), repeated as in append_sends_values, then `now`.
-- A row whose token changed or that is no longer 'sending' is left alone;
-- returns the ids written. A VALUES list rather than a JSON parameter: read
-- by field name, the JSON cost SQLite's drain 5-8% (a padding row's NULL id
-- matches nothing). `+o.status`: an expression no index serves, which keeps
-- SQLite on the primary key, driven by the list. A retry clears claimed_at;
-- a finished row keeps when its last attempt started.
-- binds: id, token, status, last_error, due_at, add_attempt, expires_at, now
WITH c (id, token, status, last_error, due_at, add_attempt, expires_at) AS (
  VALUES (?, ?, ?, ?, ?, ?, ?) /* each row */)
UPDATE engagement_outbox AS o
   SET status = c.status, last_error = c.last_error, due_at = COALESCE(c.due_at, o.due_at),
       expires_at = COALESCE(c.expires_at, o.expires_at),
       claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, claim_token = NULL,
       attempts = o.attempts + c.add_attempt, updated_at = ?
  FROM c
 WHERE o.id = c.id AND o.claim_token = c.token AND +o.status = 'sending'
RETURNING id;

-- name: record_unclaimed_values
-- record_claimed_values for rows never claimed (read with peek_channel): the
-- fence is the row's `updated_at` as it was read ("version") and its status
-- still 'scheduled'.
-- binds: id, version, status, last_error, due_at, add_attempt, expires_at, now
WITH c (id, version, status, last_error, due_at, add_attempt, expires_at) AS (
  VALUES (?, ?, ?, ?, ?, ?, ?) /* each row */)
UPDATE engagement_outbox AS o
   SET status = c.status, last_error = c.last_error, due_at = COALESCE(c.due_at, o.due_at),
       expires_at = COALESCE(c.expires_at, o.expires_at),
       claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, claim_token = NULL,
       attempts = o.attempts + c.add_attempt, updated_at = ?
  FROM c
 WHERE o.id = c.id AND o.updated_at = c.version AND +o.status = 'scheduled'
RETURNING id;

-- name: append_sends_values
-- Appends send-log rows. The tuple before `/* each row */` is repeated once
-- per row (src/store/values.rs): multi-row VALUES, because reading a JSON
-- parameter cost SQLite more than the writes. A run is padded to a fixed
-- length with rows of NULLs, which the WHERE drops.
-- binds: id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, provider_id, created_at
INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash,
                              status, detail, attempts, provider_id, created_at)
SELECT * FROM (VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) /* each row */) WHERE column1 IS NOT NULL;

-- name: append_events_values
-- Appends events at positions the transaction reserved (reserve_positions),
-- one tuple per row as in append_sends_values.
-- binds: id, position, kind, user_id, outbox_id, payload, created_at
INSERT INTO engagement_events (id, position, kind, user_id, outbox_id, payload, created_at)
SELECT * FROM (VALUES (?, ?, ?, ?, ?, ?, ?) /* each row */) WHERE column1 IS NOT NULL;

-- name: insert_inbox_values
-- Writes inbox messages at reserved positions, one tuple per row as in
-- append_sends_values; a message whose outbox row already has one is skipped.
-- binds: id, position, outbox_id, user_id, title, body, url, data, created_at
INSERT INTO engagement_inbox (id, position, outbox_id, user_id, title, body, url, data, created_at)
SELECT * FROM (VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) /* each row */) WHERE column1 IS NOT NULL
    ON CONFLICT (outbox_id) DO NOTHING;

-- name: reserve_positions
-- Takes `count` positions from the counter shared by events and inbox
-- messages and returns the last; the row lock keeps every other writer of
-- positions waiting until this transaction commits (src/store/positions.rs).
-- binds: count
UPDATE engagement_sequences SET last = last + ? WHERE name = 'stream' RETURNING last;
