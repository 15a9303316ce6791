-- Herald's statements on MariaDB and MySQL: topics and their subscribers.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.
--
-- The two inserts here skip an existing row with INSERT IGNORE, not the
-- no-op ON DUPLICATE KEY UPDATE the README prefers: sqlx sets
-- CLIENT_FOUND_ROWS, under which a row left as it was counts as affected,
-- so that form cannot say how many were added, which is what these
-- statements answer. The error IGNORE would hide (a value cut to fit its
-- column) cannot happen: a topic key is at most 200 characters of ASCII
-- and a user id at most 255 bytes (domain::TopicKey, domain::UserId),
-- checked before they get here, and the columns hold that much.

-- name: insert_topic
-- Creates a topic, or does nothing when it exists; the row count says which.
-- binds: topic_key, name, description, now, now
INSERT IGNORE INTO engagement_topics (topic_key, name, description, created_at, updated_at)
VALUES (?, ?, ?, ?, ?);

-- name: subscribe
-- Subscribes users (a JSON array of distinct ids) to a topic; those already
-- subscribed keep their row and its created_at. The row count is how many
-- were added.
-- binds: topic_key, now, users
INSERT IGNORE INTO engagement_topic_subscriptions (topic_key, created_at, user_id)
SELECT ?, ?, u.user_id
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         user_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS u;

-- name: unsubscribe
-- Removes users (a JSON array of ids) from a topic; the row count is how
-- many were subscribed.
-- binds: users, topic_key
DELETE s
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         user_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS u
  STRAIGHT_JOIN engagement_topic_subscriptions s ON s.user_id = u.user_id
 WHERE s.topic_key = ?;

-- name: topic_names
-- The names of some topics (a JSON array of keys), for the preference
-- center's list of what a user follows; a topic without a row or a name is
-- left out.
-- binds: keys
SELECT t.topic_key, t.name
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         topic_key VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
  STRAIGHT_JOIN engagement_topics t ON t.topic_key = k.topic_key
 WHERE t.name IS NOT NULL;
