-- Herald's statements on PostgreSQL: workflows: digests, escalation, frequency caps.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

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
-- Whether a trigger is already in this user's digest of this rule.
-- binds: trigger_id, rule_id, user_id
SELECT outbox_id FROM engagement_digest_items WHERE trigger_id = $1 AND rule_id = $2 AND user_id = $3;

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

-- ------------------------------------------------------------ frequency caps
--
-- A cap's slots (see src/store/throttle.rs). Rows are JSON arrays of a
-- struct's fields: `SlotKey` [bucket, slot], `TakenSlot` [bucket, slot,
-- used_at, outbox_id].

-- name: read_throttle_slots
-- The slots of some buckets (`buckets`, a JSON array of strings), in slot
-- order, locked for this transaction (the slots only: the keys come from a
-- function).
-- binds: buckets
SELECT t.bucket, t.slot, t.used_at, t.outbox_id
  FROM engagement_throttle_slots t
 WHERE t.bucket = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))))
 ORDER BY t.bucket, t.slot
   FOR UPDATE OF t;

-- name: add_throttle_slots
-- Adds the slots a batch lacks (`SlotKey` rows), unused; one another
-- instance added meanwhile stays as it is.
-- binds: slots
INSERT INTO engagement_throttle_slots (bucket, slot, used_at, outbox_id)
SELECT s.bucket, s.slot, 0, NULL
  FROM (SELECT r ->> 0 AS bucket, CAST(r ->> 1 AS bigint) AS slot
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS s
 WHERE true
    ON CONFLICT (bucket, slot) DO NOTHING;

-- name: take_throttle_slots
-- Marks slots used (`TakenSlot` rows), under the lock of the transaction
-- that read them.
-- binds: taken
UPDATE engagement_throttle_slots AS t SET used_at = c.used_at, outbox_id = c.outbox_id
  FROM (SELECT r ->> 0 AS bucket, CAST(r ->> 1 AS bigint) AS slot,
               CAST(r ->> 2 AS bigint) AS used_at, r ->> 3 AS outbox_id
          FROM jsonb_array_elements(CAST($1 AS jsonb)) AS r) AS c
 WHERE t.bucket = c.bucket AND t.slot = c.slot;
