-- Herald's statements on MariaDB and MySQL: workflows: digests, escalation, frequency caps.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

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

-- name: clear_follow_ups
-- Marks these originals' follow-ups planned (a JSON array of outbox ids).
-- binds: outbox_ids
UPDATE engagement_outbox SET follow_up_at = NULL
 WHERE id IN (SELECT done.k FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS done);

-- ------------------------------------------------------------ frequency caps
--
-- A cap's slots (see src/store/throttle.rs). Rows are JSON arrays of a
-- struct's fields: `SlotKey` [bucket, slot], `TakenSlot` [bucket, slot,
-- used_at, outbox_id].

-- name: read_throttle_slots
-- The slots of some buckets (`buckets`, a JSON array of strings), in slot
-- order, locked for this transaction.
-- binds: buckets
SELECT t.bucket, t.slot, t.used_at, t.outbox_id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
       STRAIGHT_JOIN engagement_throttle_slots t ON t.bucket = wanted.k
 ORDER BY t.bucket, t.slot
   FOR UPDATE;

-- name: add_throttle_slots
-- Adds the slots a batch lacks (`SlotKey` rows), unused; one another
-- instance added meanwhile stays as it is (the no-op update).
-- binds: slots
INSERT INTO engagement_throttle_slots (bucket, slot, used_at, outbox_id)
SELECT s.bucket, s.slot, 0, NULL
  FROM JSON_TABLE(?, '$[*]' COLUMNS (bucket VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                                     slot BIGINT PATH '$[1]')) AS s
 WHERE true
    ON DUPLICATE KEY UPDATE engagement_throttle_slots.slot = engagement_throttle_slots.slot;

-- name: take_throttle_slots
-- Marks slots used (`TakenSlot` rows), under the lock of the transaction
-- that read them.
-- binds: taken
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (bucket VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                                     slot BIGINT PATH '$[1]',
                                     used_at BIGINT PATH '$[2]',
                                     outbox_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS c
       STRAIGHT_JOIN engagement_throttle_slots t ON t.bucket = c.bucket AND t.slot = c.slot
   SET t.used_at = c.used_at, t.outbox_id = c.outbox_id;
