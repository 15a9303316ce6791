-- Herald's statements on MariaDB: retention's deletes (src/store/retention.rs).
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs. Each delete takes at most `limit`
-- rows, oldest first by an index: MariaDB takes `ORDER BY … LIMIT` on a
-- single-table delete, but not in an `IN (SELECT …)`.

-- ----------------------------------------------------------------- outbox

-- name: prune_outbox_sent
-- Finished `sent` rows older than the cutoff: a range of the primary key
-- (`first_id` is the smallest id made at the cutoff). An inbox message
-- whose escalation follow-up is pending stays: not yet planned
-- (`follow_up_at`), or planned and still scheduled or sending (a row whose
-- dedupe key is `escalate:` and its id, or that and `:2` or `:3` for a
-- chain's later steps, looked up on the unique index). The
-- batch is a derived table (a delete may not otherwise read its own table),
-- tested again on the row deleted.
-- binds: status, first_id, cutoff, limit, status, cutoff
DELETE gone FROM (SELECT o.id FROM engagement_outbox o
                   WHERE o.status = ? AND o.id < ? AND o.updated_at < ? AND o.follow_up_at IS NULL
                     AND (o.channel <> 'inbox' OR (SELECT 1 FROM engagement_outbox f
                           WHERE f.dedupe_key IN (CONCAT('escalate:', o.id), CONCAT('escalate:', o.id, ':2'),
                                            CONCAT('escalate:', o.id, ':3')) AND f.status IN ('scheduled', 'sending') LIMIT 1) IS NULL)
                   ORDER BY o.id LIMIT ?) AS chosen
  STRAIGHT_JOIN engagement_outbox gone ON gone.id = chosen.id
 WHERE gone.status = ? AND gone.updated_at < ? AND gone.follow_up_at IS NULL;

-- name: prune_outbox_others
-- prune_outbox_sent for the other terminal statuses, whose rows the status
-- index finds (its predicate, `o.status <> 'sent'`, named as on the others).
-- binds: status, first_id, cutoff, limit, status, cutoff
DELETE gone FROM (SELECT o.id FROM engagement_outbox o
                   WHERE o.status = ? AND o.status <> 'sent' AND o.id < ? AND o.updated_at < ?
                     AND o.follow_up_at IS NULL AND (o.channel <> 'inbox' OR (SELECT 1 FROM engagement_outbox f
                           WHERE f.dedupe_key IN (CONCAT('escalate:', o.id), CONCAT('escalate:', o.id, ':2'),
                                            CONCAT('escalate:', o.id, ':3')) AND f.status IN ('scheduled', 'sending') LIMIT 1) IS NULL)
                   ORDER BY o.id LIMIT ?) AS chosen
  STRAIGHT_JOIN engagement_outbox gone ON gone.id = chosen.id
 WHERE gone.status = ? AND gone.updated_at < ? AND gone.follow_up_at IS NULL;

-- --------------------------------------------------------- the other tables

-- name: prune_sends
-- The send log before the cutoff, by id (`first_id` as above).
-- binds: first_id, limit
DELETE FROM engagement_sends WHERE id < ? ORDER BY id LIMIT ?;

-- name: prune_archived_inbox
-- Messages archived before the cutoff, unless their escalation follow-up is
-- still to be planned or sent (see prune_outbox_sent).
-- binds: cutoff, limit
DELETE FROM engagement_inbox
 WHERE archived_at IS NOT NULL AND archived_at < ?
   AND (SELECT o.follow_up_at FROM engagement_outbox o WHERE o.id = engagement_inbox.outbox_id) IS NULL
   AND (SELECT 1 FROM engagement_outbox f WHERE f.dedupe_key IN (CONCAT('escalate:', engagement_inbox.outbox_id), CONCAT('escalate:', engagement_inbox.outbox_id, ':2'),
                                            CONCAT('escalate:', engagement_inbox.outbox_id, ':3'))
          AND f.status IN ('scheduled', 'sending') LIMIT 1) IS NULL
 ORDER BY archived_at LIMIT ?;

-- name: prune_bounces
-- Bounce evidence recorded before the cutoff.
-- binds: cutoff, limit
DELETE FROM engagement_bounces WHERE created_at < ? ORDER BY created_at LIMIT ?;

-- name: prune_triggers
-- Planned (or cancelled) triggers recorded before the cutoff, none of whose messages (nor a
-- digest message they joined) is still scheduled or sending, and none of
-- whose inbox messages has a follow-up to plan.
-- binds: cutoff, limit
DELETE FROM engagement_triggers
 WHERE created_at < ? AND (planned_at IS NOT NULL OR cancelled_at IS NOT NULL)
   AND (SELECT 1 FROM engagement_outbox o WHERE o.trigger_id = engagement_triggers.id
          AND (o.status IN ('scheduled', 'sending') OR o.follow_up_at IS NOT NULL) LIMIT 1) IS NULL
   AND (SELECT 1 FROM engagement_digest_items di JOIN engagement_outbox o ON o.id = di.outbox_id
         WHERE di.trigger_id = engagement_triggers.id AND o.status IN ('scheduled', 'sending') LIMIT 1) IS NULL
 ORDER BY created_at LIMIT ?;

-- name: prune_digests
-- Digests opened before the cutoff whose message is no longer scheduled or
-- sending (closed: no trigger can join them).
-- binds: cutoff, limit
DELETE FROM engagement_digests
 WHERE opened_at < ? AND NOT EXISTS (SELECT 1 FROM engagement_outbox o
        WHERE o.id = engagement_digests.outbox_id AND o.status IN ('scheduled', 'sending'))
 ORDER BY opened_at LIMIT ?;

-- name: prune_digest_items
-- What went into a digest, once its message has left the outbox.
-- binds: cutoff, limit
DELETE FROM engagement_digest_items
 WHERE created_at < ? AND NOT EXISTS (SELECT 1 FROM engagement_outbox o WHERE o.id = engagement_digest_items.outbox_id)
 ORDER BY created_at LIMIT ?;

-- name: prune_throttle_slots
-- Frequency-cap slots last used before the cutoff.
-- binds: cutoff, limit
DELETE FROM engagement_throttle_slots WHERE used_at < ? ORDER BY used_at LIMIT ?;
