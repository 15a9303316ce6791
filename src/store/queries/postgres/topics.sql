-- Herald's statements on PostgreSQL: topics and their subscribers.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- name: insert_topic
-- Creates a topic, or does nothing when it exists; the row count says which.
-- binds: topic_key, name, description, now, now
INSERT INTO engagement_topics (topic_key, name, description, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (topic_key) DO NOTHING;

-- name: update_topic
-- Replaces a topic's name and description (PUT /v1/topics/{key}).
-- binds: name, description, now, topic_key
UPDATE engagement_topics SET name = $1, description = $2, updated_at = $3 WHERE topic_key = $4;

-- name: get_topic
-- One topic, with how many users follow it (one range of the
-- subscriptions' key).
-- binds: topic_key
SELECT t.topic_key, t.name, t.description, t.created_at, t.updated_at,
       (SELECT COUNT(*) FROM engagement_topic_subscriptions s WHERE s.topic_key = t.topic_key) AS subscribers
  FROM engagement_topics t WHERE t.topic_key = $1;

-- name: list_topics
-- A page of topics in key order, after a key ('' for the first page).
-- binds: after, limit
SELECT topic_key, name, description, created_at, updated_at
  FROM engagement_topics WHERE topic_key > $1 ORDER BY topic_key LIMIT $2;

-- name: delete_topic_subscriptions
-- A topic's subscriptions, with the topic.
-- binds: topic_key
DELETE FROM engagement_topic_subscriptions WHERE topic_key = $1;

-- name: delete_topic
-- A topic's row.
-- binds: topic_key
DELETE FROM engagement_topics WHERE topic_key = $1;

-- name: subscribe
-- Subscribes users (a JSON array of distinct ids) to a topic; those already
-- subscribed keep their row and its created_at. The row count is how many
-- were added.
-- binds: topic_key, now, users
INSERT INTO engagement_topic_subscriptions (topic_key, created_at, user_id)
SELECT CAST($1 AS text), CAST($2 AS bigint), u
  FROM jsonb_array_elements_text(CAST($3 AS jsonb)) AS u
    ON CONFLICT (topic_key, user_id) DO NOTHING;

-- name: unsubscribe
-- Removes users (a JSON array of ids) from a topic; the row count is how
-- many were subscribed. The ids as an array computed once (see README.md).
-- binds: users, topic_key
DELETE FROM engagement_topic_subscriptions
 WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb)))) AND topic_key = $2;

-- name: topic_subscribers
-- A page of a topic's subscribers in user-id order, after a user id ('' for
-- the first page): the key's range, read in its order.
-- binds: topic_key, after, limit
SELECT topic_key, user_id, created_at
  FROM engagement_topic_subscriptions
 WHERE topic_key = $1 AND user_id > $2 ORDER BY user_id LIMIT $3;

-- name: user_topics
-- A page of the topics a user follows in key order, after a key ('' for the
-- first page), by the (user_id, topic_key) index.
-- binds: user_id, after, limit
SELECT topic_key, user_id, created_at
  FROM engagement_topic_subscriptions
 WHERE user_id = $1 AND topic_key > $2 ORDER BY topic_key LIMIT $3;

-- name: delete_user_subscriptions
-- Erasure: the topics a user follows.
-- binds: user_id
DELETE FROM engagement_topic_subscriptions WHERE user_id = $1;

-- name: topic_names
-- The names of some topics (a JSON array of keys), for the preference
-- center's list of what a user follows; a topic without a row or a name is
-- left out. The keys as an array computed once (see README.md).
-- binds: keys
SELECT topic_key, name
  FROM engagement_topics
 WHERE topic_key = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb)))) AND name IS NOT NULL;
