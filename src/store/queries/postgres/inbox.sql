-- Herald's statements on PostgreSQL: the inbox.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- --------------------------------------------------------------------- inbox

-- name: inbox_page
-- A page of a user's messages, newest first. The filter (`InboxFilter`) is
-- which values "archived" and "read" may take, each as a pair: (FALSE,
-- FALSE) not, (TRUE, TRUE) only, (FALSE, TRUE) either; one statement, not
-- one per filter and page bound (eight that differ in one condition). The
-- page ends below the message `before` (the previous page's last id), or
-- below `top` without one; a `before` that is not one of the user's
-- messages gives an empty page (`top` is then NULL).
-- binds: user_id, archived, archived_too, read, read_too, user_id, before, top, limit
SELECT id, position, outbox_id, user_id, title, body, url, data, created_at, seen_at, read_at, archived_at
  FROM engagement_inbox
 WHERE user_id = $1 AND (archived_at IS NOT NULL) IN ($2, $3) AND (read_at IS NOT NULL) IN ($4, $5)
   AND position < COALESCE((SELECT p.position FROM engagement_inbox p WHERE p.user_id = $6 AND p.id = $7), $8)
 ORDER BY position DESC LIMIT $9;

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
