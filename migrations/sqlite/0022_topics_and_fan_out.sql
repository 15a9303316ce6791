-- One event, many recipients (issue 31): topics and their subscribers, and
-- triggers addressed to a topic or a list of users, expanded by the planner
-- in chunks (src/planning/fan_out.rs).
--
-- A topic is a key a host chooses (`doc:42`), with an optional name and
-- description for the operator's screens.
CREATE TABLE engagement_topics (
    topic_key   TEXT    NOT NULL PRIMARY KEY,
    name        TEXT,
    description TEXT,
    created_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    updated_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
);

-- Who follows a topic. Keyed (topic_key, user_id): a fan-out reads a topic
-- a chunk at a time in user-id order, from where the last chunk stopped.
-- No foreign key to engagement_topics: a host inserting a subscription in
-- its own transaction writes this one row. `created_at` decides whether a
-- subscriber is in a trigger's audience (subscribed when the trigger was
-- recorded, or before), so its default is the database's clock.
CREATE TABLE engagement_topic_subscriptions (
    topic_key  TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
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
ALTER TABLE engagement_triggers ADD COLUMN send_at INTEGER;
-- The expansion: the last user id planned (chunks go in user-id order),
-- how many recipients so far, how many in all (counted when it starts),
-- and the instance expanding it until when (a lease another instance
-- takes over once it has passed).
ALTER TABLE engagement_triggers ADD COLUMN expand_cursor TEXT;
ALTER TABLE engagement_triggers ADD COLUMN expanded_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE engagement_triggers ADD COLUMN audience_size INTEGER;
ALTER TABLE engagement_triggers ADD COLUMN expand_owner TEXT;
ALTER TABLE engagement_triggers ADD COLUMN expand_until INTEGER;
-- POST /v1/triggers/{id}/cancel: when, and by whom.
ALTER TABLE engagement_triggers ADD COLUMN cancelled_at INTEGER;
ALTER TABLE engagement_triggers ADD COLUMN cancelled_by TEXT;
-- the expander's sweep: fan-out triggers not yet planned
CREATE INDEX engagement_triggers_expanding ON engagement_triggers (created_at) WHERE audience IS NOT NULL AND planned_at IS NULL;

-- The users a 'users' trigger names (1 to 1,000, each once).
CREATE TABLE engagement_trigger_users (
    trigger_id TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    PRIMARY KEY (trigger_id, user_id)
);

-- A digest item is one trigger's place in one user's digest of a rule: the
-- user joins its key (see the PostgreSQL file). SQLite cannot alter a
-- primary key: the table is made again, its rows copied, and its indexes
-- (0011's, 0014's) created again.
CREATE TABLE engagement_digest_items_0022 (
    trigger_id  TEXT    NOT NULL,
    rule_id     TEXT    NOT NULL,
    outbox_id   TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    occurred_at INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (trigger_id, rule_id, user_id)
);
INSERT INTO engagement_digest_items_0022 (trigger_id, rule_id, outbox_id, user_id, payload, occurred_at, created_at)
SELECT trigger_id, rule_id, outbox_id, user_id, payload, occurred_at, created_at FROM engagement_digest_items;
DROP TABLE engagement_digest_items;
ALTER TABLE engagement_digest_items_0022 RENAME TO engagement_digest_items;
CREATE INDEX engagement_digest_items_outbox ON engagement_digest_items (outbox_id, occurred_at);
CREATE INDEX engagement_digest_items_created ON engagement_digest_items (created_at);
