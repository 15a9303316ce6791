-- One event, many recipients (issue 31): topics and their subscribers, and
-- triggers addressed to a topic or a list of users, expanded by the planner
-- in chunks (src/planning/fan_out.rs). See the PostgreSQL file for what
-- each column means; the differences here are the VARCHAR widths (a topic
-- key is at most 200 characters, a user id 255 bytes) and the expander's
-- index, which MariaDB cannot make partial.
CREATE TABLE engagement_topics (
    topic_key   VARCHAR(200) NOT NULL PRIMARY KEY,
    name        VARCHAR(200),
    description TEXT,
    created_at  BIGINT       NOT NULL DEFAULT (FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)),
    updated_at  BIGINT       NOT NULL DEFAULT (FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_topic_subscriptions (
    topic_key  VARCHAR(200) NOT NULL,
    user_id    VARCHAR(255) NOT NULL,
    created_at BIGINT       NOT NULL DEFAULT (FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)),
    PRIMARY KEY (topic_key, user_id),
    KEY engagement_topic_subscriptions_user (user_id, topic_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

ALTER TABLE engagement_triggers
    ADD COLUMN audience       VARCHAR(8),
    ADD COLUMN topic_key      VARCHAR(200),
    ADD COLUMN actor_id       VARCHAR(255),
    ADD COLUMN send_at        BIGINT,
    ADD COLUMN expand_cursor  VARCHAR(255),
    ADD COLUMN expanded_count BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN audience_size  BIGINT,
    ADD COLUMN expand_owner   VARCHAR(64),
    ADD COLUMN expand_until   BIGINT,
    ADD COLUMN cancelled_at   BIGINT,
    ADD COLUMN cancelled_by   VARCHAR(255),
    ADD KEY engagement_triggers_expanding (audience, planned_at, created_at);

CREATE TABLE engagement_trigger_users (
    trigger_id VARCHAR(64)  NOT NULL,
    user_id    VARCHAR(255) NOT NULL,
    PRIMARY KEY (trigger_id, user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A digest item is one trigger's place in one user's digest of a rule: the
-- user joins its key (see the PostgreSQL file).
ALTER TABLE engagement_digest_items DROP PRIMARY KEY, ADD PRIMARY KEY (trigger_id, rule_id, user_id);
