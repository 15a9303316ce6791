-- One event, many recipients (issue 31): topics and their subscribers, and
-- triggers addressed to a topic or a list of users, expanded by the planner
-- in chunks (src/planning/fan_out.rs).
--
-- A topic is a key a host chooses (`doc:42`), with an optional name and
-- description for the operator's screens.
CREATE TABLE engagement_topics (
    topic_key   TEXT   NOT NULL PRIMARY KEY,
    name        TEXT,
    description TEXT,
    created_at  BIGINT NOT NULL DEFAULT (floor(extract(epoch from now()) * 1000)::bigint),
    updated_at  BIGINT NOT NULL DEFAULT (floor(extract(epoch from now()) * 1000)::bigint)
);

-- Who follows a topic. Keyed (topic_key, user_id): a fan-out reads a topic
-- a chunk at a time in user-id order, from where the last chunk stopped.
-- No foreign key to engagement_topics: a host inserting a subscription in
-- its own transaction writes this one row. `created_at` decides whether a
-- subscriber is in a trigger's audience (subscribed when the trigger was
-- recorded, or before), so its default is the database's clock.
CREATE TABLE engagement_topic_subscriptions (
    topic_key  TEXT   NOT NULL,
    user_id    TEXT   NOT NULL,
    created_at BIGINT NOT NULL DEFAULT (floor(extract(epoch from now()) * 1000)::bigint),
    PRIMARY KEY (topic_key, user_id)
);
-- "which topics does user X follow", and erasing a user
CREATE INDEX engagement_topic_subscriptions_user ON engagement_topic_subscriptions (user_id, topic_key);

-- A trigger's audience: NULL for one user (`user_id`, as before); 'users'
-- for a list (its ids in engagement_trigger_users); 'topic' for a topic's
-- subscribers. A fan-out trigger's `user_id` is '' (nobody in particular).
ALTER TABLE engagement_triggers ADD COLUMN audience TEXT;
ALTER TABLE engagement_triggers ADD COLUMN topic_key TEXT;
-- Left out of the audience; `actor` in templates.
ALTER TABLE engagement_triggers ADD COLUMN actor_id TEXT;
-- Nothing of this trigger is due before it (on top of each rule's delay).
ALTER TABLE engagement_triggers ADD COLUMN send_at BIGINT;
-- The expansion: the last user id planned (chunks go in user-id order),
-- how many recipients so far, how many in all (counted when it starts),
-- and the instance expanding it until when (a lease another instance
-- takes over once it has passed).
ALTER TABLE engagement_triggers ADD COLUMN expand_cursor TEXT;
ALTER TABLE engagement_triggers ADD COLUMN expanded_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE engagement_triggers ADD COLUMN audience_size BIGINT;
ALTER TABLE engagement_triggers ADD COLUMN expand_owner TEXT;
ALTER TABLE engagement_triggers ADD COLUMN expand_until BIGINT;
-- POST /v1/triggers/{id}/cancel: when, and by whom.
ALTER TABLE engagement_triggers ADD COLUMN cancelled_at BIGINT;
ALTER TABLE engagement_triggers ADD COLUMN cancelled_by TEXT;
-- the expander's sweep: fan-out triggers not yet planned
CREATE INDEX engagement_triggers_expanding ON engagement_triggers (created_at) WHERE audience IS NOT NULL AND planned_at IS NULL;

-- The users a 'users' trigger names (1 to 1,000, each once).
CREATE TABLE engagement_trigger_users (
    trigger_id TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    PRIMARY KEY (trigger_id, user_id)
);

-- A digest item is one trigger's place in one user's digest of a rule. Its
-- key was (trigger_id, rule_id) when a trigger had one user; a trigger to
-- many puts one item per recipient in their own digests, so the user joins
-- the key.
ALTER TABLE engagement_digest_items DROP CONSTRAINT engagement_digest_items_pkey;
ALTER TABLE engagement_digest_items ADD PRIMARY KEY (trigger_id, rule_id, user_id);
