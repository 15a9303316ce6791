-- Herald's statements on PostgreSQL: a flush: outcomes in sets.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ------------------------------------------------ a flush: outcomes in sets
--
-- One flush of the worker's outcomes is one transaction of these statements:
-- record_claimed / record_unclaimed, append_sends, and
-- append_events_and_inbox (positions, events, inbox messages, pg_notify).
--
-- The flush's update is sent unnamed (planned at every execution): a
-- connection caches a generic plan after five executions, and one made
-- while the outbox was small stays a sequential scan as the table grows
-- (see README.md beside this file). Rows to insert
-- travel as one JSON parameter: PostgreSQL parses it once as jsonb, and
-- measured the same as a VALUES list.

-- name: record_claimed
-- The fenced update of rows still claimed: `changes` is a JSON array of
-- rows, each an array of `Change`'s fields in order
-- (src/store/outcomes.rs); a row whose token changed or that is no longer 'sending' is left alone. Returns the ids
-- written. The rows are picked by primary key from an array of the ids
-- (see the file's head for `(o.status || '')`). A retry clears claimed_at;
-- a finished row keeps when its last attempt started.
-- binds: changes, now
UPDATE engagement_outbox AS o
   SET status = c.status, last_error = c.last_error, due_at = COALESCE(c.due_at, o.due_at),
       expires_at = COALESCE(c.expires_at, o.expires_at),
       claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, claim_token = NULL,
       attempts = o.attempts + c.add_attempt, updated_at = $2
  FROM (SELECT r ->> 0 AS id,
               r ->> 1 AS token,
               r ->> 3 AS status,
               r ->> 4 AS last_error,
               CAST(r ->> 5 AS bigint) AS due_at,
               CAST(r ->> 6 AS bigint) AS add_attempt,
               CAST(r ->> 7 AS bigint) AS expires_at
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS c
 WHERE o.id = ANY(ARRAY(SELECT r ->> 0 FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r))
   AND o.id = c.id AND o.claim_token = c.token AND (o.status || '') = 'sending'
RETURNING o.id;

-- name: record_unclaimed
-- record_claimed for rows never claimed (read with peek_channel): the fence
-- is the row's `updated_at` as it was read ("version") and its status still
-- 'scheduled'.
-- binds: changes, now
UPDATE engagement_outbox AS o
   SET status = c.status, last_error = c.last_error, due_at = COALESCE(c.due_at, o.due_at),
       expires_at = COALESCE(c.expires_at, o.expires_at),
       claimed_at = CASE WHEN c.status = 'scheduled' THEN NULL ELSE o.claimed_at END, claim_token = NULL,
       attempts = o.attempts + c.add_attempt, updated_at = $2
  FROM (SELECT r ->> 0 AS id,
               CAST(r ->> 2 AS bigint) AS version,
               r ->> 3 AS status,
               r ->> 4 AS last_error,
               CAST(r ->> 5 AS bigint) AS due_at,
               CAST(r ->> 6 AS bigint) AS add_attempt,
               CAST(r ->> 7 AS bigint) AS expires_at
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS c
 WHERE o.id = ANY(ARRAY(SELECT r ->> 0 FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r))
   AND o.id = c.id AND o.updated_at = c.version AND (o.status || '') = 'scheduled'
RETURNING o.id;

-- name: append_sends
-- Appends send-log rows: `sends` is a JSON array of rows, each an array of
-- `SendRow`'s fields in order
-- (src/store/sends.rs).
-- binds: sends, now
INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash,
                              status, detail, attempts, provider_id, created_at)
SELECT s.id, s.outbox_id, s.rule_id, s.trigger_id, s.user_id, s.channel, s.transport, s.address_hash,
       s.status, s.detail, s.attempts, s.provider_id, $2
  FROM (SELECT r ->> 0 AS id,
               r ->> 1 AS outbox_id,
               r ->> 2 AS rule_id,
               r ->> 3 AS trigger_id,
               r ->> 4 AS user_id,
               r ->> 5 AS channel,
               r ->> 6 AS transport,
               r ->> 7 AS address_hash,
               r ->> 8 AS status,
               r ->> 9 AS detail,
               CAST(r ->> 10 AS bigint) AS attempts,
               r ->> 11 AS provider_id
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS s;

-- name: append_events
-- Appends events at positions the transaction reserved (reserve_positions):
-- `events` is a JSON array of rows, each an array of
-- `EventJson`'s fields in order
-- (src/store/events.rs).
-- binds: events, now
INSERT INTO engagement_events (id, position, kind, user_id, outbox_id, payload, created_at)
SELECT e.id, e.position, e.kind, e.user_id, e.outbox_id, e.payload, $2
  FROM (SELECT r ->> 0 AS id,
               CAST(r ->> 1 AS bigint) AS position,
               r ->> 2 AS kind,
               r ->> 3 AS user_id,
               r ->> 4 AS outbox_id,
               r ->> 5 AS payload
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS e;

-- name: append_events_and_inbox
-- The end of an outcome flush in one statement: takes `count` positions
-- (reserve_positions), appends the events and writes the inbox messages at
-- them (as append_events does, and as the other dialects'
-- insert_inbox_values do; a row's position in the JSON is its offset from
-- the first position taken), and notifies other instances
-- (herald_events; herald_inbox when `users` is not ''). One statement
-- because the counter's row lock is held from the reservation until the
-- commit and every other flush waits behind it: as four statements the
-- holder spent about as long waiting for the process's next statement
-- (`ClientRead`) as running them (pg_stat_activity sampled every 100 ms
-- through a 1,000,000-recipient fan-out: 43 samples waiting for the client
-- while holding it, 47 running, 25 of other flushes waiting for it).
-- binds: count, events, messages, now, users
WITH p AS (UPDATE engagement_sequences SET last = last + $1 WHERE name = 'stream'
           RETURNING last - $1 + 1 AS first),
     e AS (INSERT INTO engagement_events (id, position, kind, user_id, outbox_id, payload, created_at)
           SELECT r ->> 0, p.first + CAST(r ->> 1 AS bigint), r ->> 2, r ->> 3, r ->> 4, r ->> 5, $4
             FROM p CROSS JOIN jsonb_array_elements(CAST($2 AS jsonb)) AS r),
     m AS (INSERT INTO engagement_inbox (id, position, outbox_id, user_id, title, body, url, data, created_at)
           SELECT r ->> 0, p.first + CAST(r ->> 1 AS bigint), r ->> 2, r ->> 3, r ->> 4, r ->> 5, r ->> 6,
                  r ->> 7, $4
             FROM p CROSS JOIN jsonb_array_elements(CAST($3 AS jsonb)) AS r
               ON CONFLICT (outbox_id) DO NOTHING)
SELECT pg_notify('herald_events', ''), CASE WHEN $5 <> '' THEN pg_notify('herald_inbox', $5) END FROM p;

-- name: reserve_positions
-- Takes `count` positions from the counter shared by events and inbox
-- messages and returns the last; the row lock keeps every other writer of
-- positions waiting until this transaction commits (src/store/positions.rs).
-- binds: count
UPDATE engagement_sequences SET last = last + $1 WHERE name = 'stream' RETURNING last;

-- name: newest_position
-- The newest position of a committed transaction.
-- binds:
SELECT last FROM engagement_sequences WHERE name = 'stream';
