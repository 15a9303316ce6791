-- Herald's statements on PostgreSQL, by name (see src/store/queries/mod.rs).
-- Each block: `-- name:`, what it is for, `-- binds:` (the values the code
-- binds, in order: $1, $2, …; the same list in sqlite.sql and mariadb.sql),
-- then the statement as PostgreSQL receives it.
--
-- `(status || '') = …`: an expression on status that no index can serve.
-- With statistics that still say "no row is scheduled" (after a burst of
-- enqueues on a table of millions of finished rows) a plain `status = …`
-- sent updates through every scheduled row (the partial index) instead of
-- the primary key.
--
-- `id = ANY(ARRAY(SELECT …))` rather than `id IN (SELECT … LIMIT n)`: the
-- latter may be planned as a nested loop that runs the subquery once per
-- scheduled row (223 s for 20,000 rows under such statistics). The array is
-- computed once, and the rows are then found by primary key.
--
-- A JSON parameter holding a list of keys is an array of strings
-- (jsonb_array_elements_text); one holding rows is an array of arrays, each a
-- Rust struct's fields in order (see `json_rows::row_as_array`), read by
-- position and named by alias: `r ->> 0 AS id`. Objects read by field name
-- (jsonb_to_recordset) cost the drain 12-20% and the enqueue 17-20% (herald
-- bench --rows 20000, alternating). jsonb: parsed once.

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
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
  FROM engagement_sends WHERE user_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2;

-- name: sends_for_outbox
-- One outbox row's send log, oldest first.
-- binds: outbox_id
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
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

-- ------------------------------------------------ a flush: outcomes in sets
--
-- One flush of the worker's outcomes is one transaction of these statements:
-- record_claimed / record_unclaimed, append_sends, reserve_positions,
-- append_events, insert_inbox, and one pg_notify.
--
-- The flush's update is sent unnamed (planned at every execution): a
-- connection caches a generic plan after five executions, and one made
-- while the outbox was small stays a sequential scan as the table grows
-- (see `Dialect::select_by_keys` in src/store/json_rows.rs). Rows to insert
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
                              status, detail, attempts, created_at)
SELECT s.id, s.outbox_id, s.rule_id, s.trigger_id, s.user_id, s.channel, s.transport, s.address_hash,
       s.status, s.detail, s.attempts, $2
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
               CAST(r ->> 10 AS bigint) AS attempts
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

-- name: insert_inbox
-- Writes inbox messages at reserved positions: `messages` is a JSON array of
-- rows, each an array of `InboxRow`'s fields in order (src/store/inbox.rs); a
-- message whose outbox row already has one is skipped.
-- binds: messages, now
INSERT INTO engagement_inbox (id, position, outbox_id, user_id, title, body, url, data, created_at)
SELECT m.id, m.position, m.outbox_id, m.user_id, m.title, m.body, m.url, m.data, $2
  FROM (SELECT r ->> 0 AS id,
               CAST(r ->> 1 AS bigint) AS position,
               r ->> 2 AS outbox_id,
               r ->> 3 AS user_id,
               r ->> 4 AS title,
               r ->> 5 AS body,
               r ->> 6 AS url,
               r ->> 7 AS data
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS m
    ON CONFLICT (outbox_id) DO NOTHING;

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

-- ------------------------------------------------------------------ triggers

-- name: insert_trigger
-- Records one trigger; one whose idempotency key exists is skipped (the
-- caller reads back which trigger holds the key).
-- binds: id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (idempotency_key) DO NOTHING;

-- name: trigger_by_idempotency_key
-- The trigger that holds an idempotency key.
-- binds: idempotency_key
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE idempotency_key = $1;

-- name: accept_triggers
-- Records a batch of triggers planned in the same transaction (the API's
-- path): `triggers` is a JSON array of rows, each an array of
-- `TriggerJson`'s fields in order
-- (src/store/triggers.rs). A trigger whose idempotency key exists is skipped;
-- returns the ids written.
-- binds: now, now, triggers
INSERT INTO engagement_triggers (id, type, user_id, payload, idempotency_key, request_hash, occurred_at,
                                 created_at, planned_at, planned_count, plan_detail)
SELECT t.id, t.type, t.user_id, t.payload, t.idempotency_key, t.request_hash, t.occurred_at, $1, $2,
       t.planned_count, t.plan_detail
  FROM (SELECT r ->> 0 AS id,
               r ->> 1 AS type,
               r ->> 2 AS user_id,
               r ->> 3 AS payload,
               r ->> 4 AS idempotency_key,
               r ->> 5 AS request_hash,
               CAST(r ->> 6 AS bigint) AS occurred_at,
               CAST(r ->> 7 AS bigint) AS planned_count,
               r ->> 8 AS plan_detail
          FROM jsonb_array_elements(CAST($3 AS jsonb)) AS r) AS t
    ON CONFLICT (idempotency_key) DO NOTHING RETURNING id;

-- name: triggers_by_idempotency_keys
-- The triggers that hold these idempotency keys (a JSON array of strings),
-- found through an array computed once (see the file's head).
-- binds: keys
SELECT h.id, h.type, h.user_id, h.payload, h.idempotency_key, h.request_hash, h.occurred_at, h.created_at,
       h.planned_at, h.planned_count, h.plan_detail
  FROM engagement_triggers h
 WHERE h.idempotency_key = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: plan_triggers
-- Marks triggers planned, by compare-and-set on planned_at (which planner
-- owns each trigger; the loser writes nothing for it): `plans` is a JSON
-- array of [id, planned_count, plan_detail] rows (`PlanJson`). Returns the ids won.
-- binds: plans, now
UPDATE engagement_triggers AS t
   SET planned_at = $2, planned_count = p.planned_count, plan_detail = p.plan_detail
  FROM (SELECT r ->> 0 AS id,
               CAST(r ->> 1 AS bigint) AS planned_count,
               r ->> 2 AS plan_detail
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS p
 WHERE t.id = p.id AND t.planned_at IS NULL
RETURNING t.id;

-- name: get_trigger
-- One trigger by id.
-- binds: id
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE id = $1;

-- name: trigger_times
-- When these triggers (a JSON array of ids) happened. Sent unnamed: see the
-- flush's note above.
-- binds: ids
SELECT t.id, t.occurred_at
  FROM engagement_triggers t
 WHERE t.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: recorded_triggers
-- Which of these trigger ids (a JSON array of strings) are recorded.
-- binds: ids
SELECT t.id
  FROM engagement_triggers t
 WHERE t.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: unplanned_triggers
-- Triggers the planner has not planned yet, oldest first.
-- binds: limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE planned_at IS NULL ORDER BY created_at LIMIT $1;

-- name: outbox_for_trigger
-- The outbox rows planned from one trigger.
-- binds: trigger_id
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at
  FROM engagement_outbox WHERE trigger_id = $1 ORDER BY id;

-- name: recent_triggers
-- The most recent triggers of a type, newest first (rule previews).
-- binds: type, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE type = $1 ORDER BY created_at DESC LIMIT $2;

-- name: triggers_for_user
-- A user's triggers, newest first.
-- binds: user_id, limit
SELECT id, type, user_id, payload, idempotency_key, request_hash, occurred_at, created_at,
       planned_at, planned_count, plan_detail
  FROM engagement_triggers WHERE user_id = $1 ORDER BY created_at DESC LIMIT $2;


-- -------------------------------------------------------------------- events

-- name: events_after
-- Events after a position, oldest first: what a follower reads.
-- binds: position, limit
SELECT id, position, kind, user_id, outbox_id, payload, created_at FROM engagement_events
 WHERE position > $1 ORDER BY position LIMIT $2;

-- name: latest_event_position
-- The newest event's position (NULL when there is none).
-- binds:
SELECT MAX(position) AS p FROM engagement_events;

-- name: event_position
-- The position of one event, for a follower that resumes with an event id.
-- binds: id
SELECT position FROM engagement_events WHERE id = $1;


-- --------------------------------------------------------------------- inbox

-- name: inbox_after
-- A user's messages after a position, oldest first: the live stream.
-- binds: user_id, position, limit
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox WHERE user_id = $1 AND position > $2 ORDER BY position LIMIT $3;

-- name: inbox_latest_position
-- A user's newest message's position (NULL when there is none).
-- binds: user_id
SELECT MAX(position) AS p FROM engagement_inbox WHERE user_id = $1;

-- name: inbox_resume_position
-- Where a stream resumes for a client of an older version, which sent a
-- message id: ids are UUIDv7, so the messages created after it are the ones
-- it has not seen.
-- binds: user_id, id, id
SELECT MAX(position) AS p FROM engagement_inbox WHERE user_id = $1 AND (id = $2 OR id < $3);

-- name: inbox_counts
-- A user's badge counts. COUNT of a CASE, not SUM: SUM is DECIMAL on MariaDB
-- and NUMERIC on PostgreSQL, which sqlx's Any driver cannot carry.
-- binds: user_id
SELECT COUNT(CASE WHEN seen_at IS NULL THEN 1 END) AS unseen,
       COUNT(CASE WHEN read_at IS NULL THEN 1 END) AS unread
  FROM engagement_inbox WHERE user_id = $1 AND archived_at IS NULL;

-- name: inbox_mark_seen
-- Marks one of a user's messages seen. Each inbox_mark_* takes `now` twice
-- (not `seen_at = read_at`: MariaDB evaluates SET left to right with new
-- values, the others with old ones).
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET seen_at = COALESCE(seen_at, $1, $2) WHERE id = $3 AND user_id = $4;

-- name: inbox_mark_read
-- Marks one of a user's messages read, and so seen.
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET read_at = COALESCE(read_at, $1), seen_at = COALESCE(seen_at, $2)
 WHERE id = $3 AND user_id = $4;

-- name: inbox_mark_unread
-- Marks one of a user's messages unread (it stays seen).
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET read_at = NULL, seen_at = COALESCE(seen_at, $1, $2) WHERE id = $3 AND user_id = $4;

-- name: inbox_archive
-- Archives one of a user's messages, and so marks it seen.
-- binds: now, now, id, user_id
UPDATE engagement_inbox SET archived_at = COALESCE(archived_at, $1), seen_at = COALESCE(seen_at, $2)
 WHERE id = $3 AND user_id = $4;

-- name: inbox_message
-- One of a user's messages (scoped by user: a token never reads another's).
-- binds: id, user_id
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox WHERE id = $1 AND user_id = $2;

-- name: inbox_read_all
-- Marks every unarchived unread message of a user read.
-- binds: now, now, user_id
UPDATE engagement_inbox SET read_at = $1, seen_at = COALESCE(seen_at, $2)
 WHERE user_id = $3 AND read_at IS NULL AND archived_at IS NULL;


-- ----------------------------------------------------------------- instances

-- name: end_lease
-- Gives an instance's lease up (a clean shutdown).
-- binds: id
DELETE FROM engagement_instances WHERE id = $1;

-- name: rescue_lapsed
-- Takes back `sending` rows claimed before `cutoff` by an instance whose
-- lease was not valid at `cutoff`. `status = 'sending'` first: the status
-- index (whose predicate, `status <> 'sent'`, is repeated for SQLite and
-- PostgreSQL's generic plans) finds the few rows in flight; the lease is
-- looked up per row by primary key.
-- binds: detail, now, cutoff, cutoff
UPDATE engagement_outbox
   SET status = 'scheduled', claim_token = NULL, claimed_at = NULL, last_error = $1, updated_at = $2
 WHERE status = 'sending' AND status <> 'sent' AND claimed_by IS NOT NULL AND claimed_at < $3
   AND NOT EXISTS (SELECT 1 FROM engagement_instances i
                    WHERE i.id = engagement_outbox.claimed_by AND i.expires_at >= $4);

-- name: forget_lapsed_instances
-- Forgets instance rows whose lease lapsed before `cutoff`.
-- binds: cutoff
DELETE FROM engagement_instances WHERE expires_at < $1;

-- name: list_instances
-- Every instance row, newest lease first.
-- binds:
SELECT id, host, pid, started_at, renewed_at, expires_at FROM engagement_instances ORDER BY expires_at DESC;

-- name: renew_lease
-- Takes or renews an instance's lease.
-- binds: id, host, pid, started_at, renewed_at, expires_at
INSERT INTO engagement_instances (id, host, pid, started_at, renewed_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
    ON CONFLICT (id) DO UPDATE SET renewed_at = excluded.renewed_at, expires_at = excluded.expires_at;


-- ------------------------------------------------------------------- digests

-- name: digest_items
-- The items of these digest messages (a JSON array of outbox ids), in the
-- order they happened.
-- binds: outbox_ids
SELECT i.outbox_id, i.trigger_id, i.payload, i.occurred_at
  FROM engagement_digest_items i
 WHERE i.outbox_id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))))
 ORDER BY i.outbox_id, i.occurred_at, i.trigger_id;

-- name: digests_of_trigger
-- The digests a trigger is in, with each one's item count.
-- binds: trigger_id
SELECT i.outbox_id, i.rule_id, o.channel, o.status, o.due_at,
       (SELECT COUNT(*) FROM engagement_digest_items c WHERE c.outbox_id = i.outbox_id) AS items
  FROM engagement_digest_items i JOIN engagement_outbox o ON o.id = i.outbox_id
 WHERE i.trigger_id = $1 ORDER BY i.rule_id;

-- name: digest_item_of_rule
-- Whether a trigger is already in a digest of this rule.
-- binds: trigger_id, rule_id
SELECT outbox_id FROM engagement_digest_items WHERE trigger_id = $1 AND rule_id = $2;

-- name: create_digest_bucket
-- Makes a bucket's row if it has none (an empty one: no digest open).
-- binds: bucket
INSERT INTO engagement_digests (bucket, outbox_id, opened_at, items) VALUES ($1, '', 0, 0)
    ON CONFLICT (bucket) DO NOTHING;

-- name: read_digest_bucket
-- A bucket's open digest, locked for this transaction (SQLite: the one
-- writer holds the database).
-- binds: bucket
SELECT outbox_id, opened_at, items FROM engagement_digests WHERE bucket = $1 FOR UPDATE;

-- name: join_digest
-- The compare-and-set that decides whether the open digest is still open:
-- it moves updated_at (by at least 1 ms, whatever the clock says) so a
-- reader of the row's old version loses; `closing` (1 or 0) brings its due
-- time forward to now when this item fills it.
-- binds: now, now, closing, now, now, outbox_id
UPDATE engagement_outbox
   SET updated_at = CASE WHEN updated_at >= $1 THEN updated_at + 1 ELSE $2 END,
       due_at = CASE WHEN $3 = 1 AND due_at > $4 THEN $5 ELSE due_at END
 WHERE id = $6 AND status = 'scheduled';

-- name: count_digest_item
-- Counts an item into its bucket's open digest.
-- binds: bucket
UPDATE engagement_digests SET items = items + 1 WHERE bucket = $1;

-- name: open_digest
-- Opens a bucket's next digest with its first item.
-- binds: outbox_id, opened_at, bucket
UPDATE engagement_digests SET outbox_id = $1, opened_at = $2, items = 1 WHERE bucket = $3;

-- name: insert_digest_item
-- Adds a trigger to a digest message.
-- binds: trigger_id, rule_id, outbox_id, user_id, payload, occurred_at, created_at
INSERT INTO engagement_digest_items (trigger_id, rule_id, outbox_id, user_id, payload, occurred_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7);


-- ---------------------------------------------------------------- escalation

-- name: original_states
-- What became of the originals of escalations (a JSON array of outbox ids):
-- status, and when the inbox message was delivered, seen and read.
-- binds: outbox_ids
SELECT o.id, o.status, i.created_at AS delivered_at, i.seen_at, i.read_at
  FROM (SELECT k FROM jsonb_array_elements_text(CAST($1 AS jsonb)) AS r (k)) AS wanted
  JOIN engagement_outbox o ON o.id = wanted.k
  LEFT JOIN engagement_inbox i ON i.outbox_id = o.id;

-- name: due_follow_ups
-- Messages whose escalation's follow-up is due, earliest first.
-- binds: now, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at, follow_up_at
  FROM engagement_outbox WHERE follow_up_at <= $1 ORDER BY follow_up_at LIMIT $2;

-- name: clear_follow_ups
-- Marks these originals' follow-ups planned (a JSON array of outbox ids).
-- binds: outbox_ids
UPDATE engagement_outbox SET follow_up_at = NULL
 WHERE id IN (SELECT done.k FROM (SELECT k FROM jsonb_array_elements_text(CAST($1 AS jsonb)) AS r (k)) AS done);


-- --------------------------------------------------------------------- rules

-- name: insert_rule
-- Adds a rule.
-- binds: id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at
INSERT INTO engagement_rules (id, name, trigger_type, condition_expr, channel, template, delay_seconds,
                              grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);

-- name: get_rule
-- One rule.
-- binds: id
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules WHERE id = $1;

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
   SET name = $1, trigger_type = $2, condition_expr = $3, channel = $4, template = $5, delay_seconds = $6,
       grace_seconds = $7, category = $8, enabled = $9, webhook_url = $10, workflow = $11, updated_at = $12
 WHERE id = $13;

-- name: delete_rule
-- Deletes a rule.
-- binds: id
DELETE FROM engagement_rules WHERE id = $1;

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
  FROM engagement_rules r
 WHERE r.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: rules_by_ids
-- These rules (a JSON array of ids), those that exist.
-- binds: ids
SELECT r.id, r.name, r.trigger_type, r.condition_expr, r.channel, r.template, r.delay_seconds, r.grace_seconds,
       r.category, r.enabled, r.webhook_url, r.workflow, r.created_at, r.updated_at
  FROM engagement_rules r
 WHERE r.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));


-- ------------------------------------------------------------- notifications

-- name: notify_enqueued
-- PostgreSQL only (LISTEN/NOTIFY): tells other instances' workers, from
-- inside the writing transaction (sent at commit), that rows were enqueued.
-- binds:
SELECT pg_notify('herald_outbox', '');

-- name: notify_events
-- Tells other instances' followers that events were appended (from inside
-- the writing transaction, or alone after it).
-- binds:
SELECT pg_notify('herald_events', '');

-- name: notify_inbox
-- Tells other instances' streams whose inboxes changed: `users` is their ids,
-- one a line, or "*" for every stream (a payload is limited to 8000 bytes).
-- binds: users
SELECT 1 FROM (SELECT pg_notify('herald_inbox', $1)) AS n;

-- name: notify_events_and_inbox
-- notify_events and notify_inbox in one statement: a flush that appended
-- events and wrote inbox messages.
-- binds: users
SELECT pg_notify('herald_events', ''), pg_notify('herald_inbox', $1);


-- -------------------------------------------------------------- suppressions

-- name: insert_suppression
-- Suppresses an address for a category ('*': all), unless it already is
-- (the caller then replaces it where it should).
-- binds: address_hash, category, reason, detail, created_at, expires_at
INSERT INTO engagement_suppressions (address_hash, category, reason, detail, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
    ON CONFLICT (address_hash, category) DO NOTHING;

-- name: find_suppression
-- The suppression in force for an address and a category, or for all
-- categories ('*' sorts before letters, so that one is reported when both
-- exist).
-- binds: address_hash, all_categories, category, now
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = $1 AND category IN ($2, $3) AND (expires_at IS NULL OR expires_at > $4)
 ORDER BY category LIMIT 1;

-- name: suppressions_of_address
-- An address's suppressions.
-- binds: address_hash, limit
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = $1 ORDER BY category LIMIT $2;

-- name: list_suppressions
-- The newest suppressions.
-- binds: limit
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 ORDER BY created_at DESC, address_hash LIMIT $1;

-- name: sends_for_address
-- The send log for one address hash, newest first (served by
-- engagement_sends_address).
-- binds: address_hash, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
  FROM engagement_sends WHERE address_hash = $1 ORDER BY created_at DESC, id DESC LIMIT $2;

-- name: outbox_by_dedupe_keys
-- Which rows hold these dedupe keys (a JSON array of strings): after an
-- insert that skipped some, what became of each.
-- binds: keys
SELECT o.id, o.dedupe_key
  FROM engagement_outbox o
 WHERE o.dedupe_key = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));


-- ------------------------------------------------------------------ api keys

-- name: insert_api_key
-- Adds an API key (its hash, never the key).
-- binds: id, name, key_hash, prefix, created_at, revoked_at
INSERT INTO engagement_api_keys (id, name, key_hash, prefix, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6);

-- name: api_key_by_hash
-- The key a request presents, by its hash: every API call's authentication.
-- binds: key_hash
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys WHERE key_hash = $1;

-- name: list_api_keys
-- Every API key, oldest first.
-- binds:
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys ORDER BY created_at, id;

-- name: revoke_api_key
-- Revokes a key (once: a revoked key keeps when it was revoked).
-- binds: now, id
UPDATE engagement_api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL;
