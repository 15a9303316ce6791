-- Herald's statements on SQLite: workflows: digests, escalation, frequency caps.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ------------------------------------------------------------------- digests

-- name: digest_items
-- The items of these digest messages (a JSON array of outbox ids), in the
-- order they happened.
-- binds: outbox_ids
SELECT i.outbox_id, i.trigger_id, i.payload, i.occurred_at
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_digest_items i ON i.outbox_id = wanted.k
 ORDER BY i.outbox_id, i.occurred_at, i.trigger_id;

-- name: create_digest_bucket
-- Makes a bucket's row if it has none (an empty one: no digest open).
-- binds: bucket
INSERT INTO engagement_digests (bucket, outbox_id, opened_at, items) VALUES (?, '', 0, 0)
    ON CONFLICT (bucket) DO NOTHING;

-- name: read_digest_bucket
-- A bucket's open digest, locked for this transaction (SQLite: the one
-- writer holds the database).
-- binds: bucket
SELECT outbox_id, opened_at, items FROM engagement_digests WHERE bucket = ?;

-- ---------------------------------------------------------------- escalation

-- name: original_states
-- What became of the originals of escalations (a JSON array of outbox ids):
-- status, and when the inbox message was delivered, seen and read.
-- binds: outbox_ids
SELECT o.id, o.status, i.created_at AS delivered_at, i.seen_at, i.read_at
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_outbox o ON o.id = wanted.k
  LEFT JOIN engagement_inbox i ON i.outbox_id = o.id;

-- name: clear_follow_ups
-- Marks these originals' follow-ups planned (a JSON array of outbox ids).
-- binds: outbox_ids
UPDATE engagement_outbox SET follow_up_at = NULL
 WHERE id IN (SELECT done.k FROM (SELECT value AS k FROM json_each(?)) AS done);

-- ------------------------------------------------------------ frequency caps
--
-- A cap's slots (see src/store/throttle.rs). Rows are JSON arrays of a
-- struct's fields: `SlotKey` [bucket, slot], `TakenSlot` [bucket, slot,
-- used_at, outbox_id], `KnownSlot` [bucket, slot, used_at, outbox_id, added,
-- was_used, was_for].

-- name: read_throttle_slots
-- The slots of some buckets (`buckets`, a JSON array of strings), in slot
-- order. SQLite has one writer, so nothing to lock.
-- binds: buckets
SELECT t.bucket, t.slot, t.used_at, t.outbox_id
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_throttle_slots t ON t.bucket = wanted.k
 ORDER BY t.bucket, t.slot;

-- name: add_throttle_slots
-- Adds the slots a batch lacks (`SlotKey` rows), unused; one another writer
-- added meanwhile stays as it is. SQLite reads `INSERT … SELECT … ON
-- CONFLICT` as a join constraint unless the SELECT has a WHERE.
-- binds: slots
INSERT INTO engagement_throttle_slots (bucket, slot, used_at, outbox_id)
SELECT s.bucket, s.slot, 0, NULL
  FROM (SELECT value ->> 0 AS bucket, value ->> 1 AS slot FROM json_each(?)) AS s
 WHERE true
    ON CONFLICT (bucket, slot) DO NOTHING;

-- name: take_throttle_slots
-- Marks slots used (`TakenSlot` rows), under the lock of the transaction
-- that read them.
-- binds: taken
UPDATE engagement_throttle_slots AS t SET used_at = c.used_at, outbox_id = c.outbox_id
  FROM (SELECT value ->> 0 AS bucket, value ->> 1 AS slot, value ->> 2 AS used_at, value ->> 3 AS outbox_id
          FROM json_each(?)) AS c
 WHERE t.bucket = c.bucket AND t.slot = c.slot;

-- name: take_known_throttle_slots
-- The usual case in one write statement (`KnownSlot` rows, read outside
-- the write lock): every slot is written only if all `expected` are still
-- as they were read (`added` 1: nobody made it; 0: its use and message
-- unchanged), else none is, and the caller takes the locked path.
-- binds: slots, expected
INSERT INTO engagement_throttle_slots (bucket, slot, used_at, outbox_id)
SELECT c.bucket, c.slot, c.used_at, c.outbox_id
  FROM (SELECT value ->> 0 AS bucket, value ->> 1 AS slot, value ->> 2 AS used_at, value ->> 3 AS outbox_id
          FROM json_each(?1)) AS c
 WHERE (SELECT COUNT(*)
          FROM (SELECT value ->> 0 AS bucket, value ->> 1 AS slot, value ->> 4 AS added,
                       value ->> 5 AS was_used, value ->> 6 AS was_for
                  FROM json_each(?1)) AS k
         WHERE CASE WHEN k.added = 1
               THEN NOT EXISTS (SELECT 1 FROM engagement_throttle_slots u WHERE u.bucket = k.bucket AND u.slot = k.slot)
               ELSE EXISTS (SELECT 1 FROM engagement_throttle_slots u WHERE u.bucket = k.bucket AND u.slot = k.slot
                              AND u.used_at = k.was_used AND COALESCE(u.outbox_id, '') = k.was_for) END) = ?2
    ON CONFLICT (bucket, slot) DO UPDATE SET used_at = excluded.used_at, outbox_id = excluded.outbox_id;
