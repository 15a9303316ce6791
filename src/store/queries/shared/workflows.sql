-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: workflows.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/workflows.sql and mariadb/workflows.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: digests_of_trigger
-- The digests a trigger is in, with each one's item count.
-- binds: trigger_id
SELECT i.outbox_id, i.rule_id, o.channel, o.status, o.due_at,
       (SELECT COUNT(*) FROM engagement_digest_items c WHERE c.outbox_id = i.outbox_id) AS items
  FROM engagement_digest_items i JOIN engagement_outbox o ON o.id = i.outbox_id
 WHERE i.trigger_id = ? ORDER BY i.rule_id;

-- name: digest_item_of_rule
-- Whether a trigger is already in this user's digest of this rule.
-- binds: trigger_id, rule_id, user_id
SELECT outbox_id FROM engagement_digest_items WHERE trigger_id = ? AND rule_id = ? AND user_id = ?;

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

-- name: due_follow_ups
-- Messages whose escalation's follow-up is due, earliest first.
-- binds: now, limit
SELECT id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status,
       due_at, expires_at, attempts, last_error, claim_token, claimed_at, created_at, updated_at, follow_up_at
  FROM engagement_outbox WHERE follow_up_at <= ? ORDER BY follow_up_at LIMIT ?;
