-- Herald's statements SQLite and MariaDB run in the same text: retention's
-- reads and deletes of events (src/store/retention.rs). How a block reads:
-- src/store/queries/mod.rs.

-- name: prune_events_oldest
-- The positions and times of the oldest events: what prune_events deletes
-- up to (the run of them older than the cutoff).
-- binds: limit
SELECT position, created_at FROM engagement_events ORDER BY position LIMIT ?;

-- name: prune_events
-- Events up to a position, a range of the primary key.
-- binds: last
DELETE FROM engagement_events WHERE position <= ?;
