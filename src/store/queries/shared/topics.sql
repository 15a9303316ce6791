-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: topics and their subscribers.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/topics.sql and mariadb/topics.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: update_topic
-- Replaces a topic's name and description (PUT /v1/topics/{key}).
-- binds: name, description, now, topic_key
UPDATE engagement_topics SET name = ?, description = ?, updated_at = ? WHERE topic_key = ?;

-- name: get_topic
-- One topic, with how many users follow it (one range of the
-- subscriptions' key).
-- binds: topic_key
SELECT t.topic_key, t.name, t.description, t.created_at, t.updated_at,
       (SELECT COUNT(*) FROM engagement_topic_subscriptions s WHERE s.topic_key = t.topic_key) AS subscribers
  FROM engagement_topics t WHERE t.topic_key = ?;

-- name: list_topics
-- A page of topics in key order, after a key ('' for the first page).
-- binds: after, limit
SELECT topic_key, name, description, created_at, updated_at
  FROM engagement_topics WHERE topic_key > ? ORDER BY topic_key LIMIT ?;

-- name: delete_topic_subscriptions
-- A topic's subscriptions, with the topic.
-- binds: topic_key
DELETE FROM engagement_topic_subscriptions WHERE topic_key = ?;

-- name: delete_topic
-- A topic's row.
-- binds: topic_key
DELETE FROM engagement_topics WHERE topic_key = ?;

-- name: topic_subscribers
-- A page of a topic's subscribers in user-id order, after a user id ('' for
-- the first page): the key's range, read in its order.
-- binds: topic_key, after, limit
SELECT topic_key, user_id, created_at
  FROM engagement_topic_subscriptions
 WHERE topic_key = ? AND user_id > ? ORDER BY user_id LIMIT ?;

-- name: user_topics
-- A page of the topics a user follows in key order, after a key ('' for the
-- first page), by the (user_id, topic_key) index.
-- binds: user_id, after, limit
SELECT topic_key, user_id, created_at
  FROM engagement_topic_subscriptions
 WHERE user_id = ? AND topic_key > ? ORDER BY topic_key LIMIT ?;

-- name: delete_user_subscriptions
-- Erasure: the topics a user follows.
-- binds: user_id
DELETE FROM engagement_topic_subscriptions WHERE user_id = ?;
