-- Herald's statements on SQLite: topics and their subscribers.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- name: insert_topic
-- Creates a topic, or does nothing when it exists; the row count says which.
-- binds: topic_key, name, description, now, now
INSERT INTO engagement_topics (topic_key, name, description, created_at, updated_at)
VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (topic_key) DO NOTHING;

-- name: subscribe
-- Subscribes users (a JSON array of distinct ids) to a topic; those already
-- subscribed keep their row and its created_at. The row count is how many
-- were added. (`WHERE true` lets SQLite parse the ON CONFLICT after an
-- INSERT … SELECT.)
-- binds: topic_key, now, users
INSERT INTO engagement_topic_subscriptions (topic_key, created_at, user_id)
SELECT ?, ?, value FROM json_each(?) WHERE true
    ON CONFLICT (topic_key, user_id) DO NOTHING;

-- name: unsubscribe
-- Removes users (a JSON array of ids) from a topic; the row count is how
-- many were subscribed.
-- binds: users, topic_key
DELETE FROM engagement_topic_subscriptions
 WHERE user_id IN (SELECT value FROM json_each(?)) AND topic_key = ?;

-- name: topic_names
-- The names of some topics (a JSON array of keys), for the preference
-- center's list of what a user follows; a topic without a row or a name is
-- left out.
-- binds: keys
SELECT topic_key, name
  FROM engagement_topics
 WHERE topic_key IN (SELECT value FROM json_each(?)) AND name IS NOT NULL;
