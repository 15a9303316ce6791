-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: events.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/events.sql and mariadb/events.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: events_after
-- Events after a position, oldest first: what a follower reads.
-- binds: position, limit
SELECT id, position, kind, user_id, outbox_id, payload, created_at FROM engagement_events
 WHERE position > ? ORDER BY position LIMIT ?;

-- name: latest_event_position
-- The newest event's position (NULL when there is none).
-- binds:
SELECT MAX(position) AS p FROM engagement_events;

-- name: event_position
-- The position of one event, for a follower that resumes with an event id.
-- binds: id
SELECT position FROM engagement_events WHERE id = ?;
