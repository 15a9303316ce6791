-- Workflows on a rule (issue 14): see the SQLite file for the why.
ALTER TABLE engagement_rules ADD COLUMN workflow MEDIUMTEXT;
ALTER TABLE engagement_recipients ADD COLUMN quiet_hours TEXT;

CREATE TABLE engagement_throttle_slots (
    bucket    VARCHAR(64) NOT NULL,
    slot      BIGINT      NOT NULL,
    used_at   BIGINT      NOT NULL,
    outbox_id VARCHAR(36),
    PRIMARY KEY (bucket, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_digests (
    bucket    VARCHAR(64) NOT NULL PRIMARY KEY,
    outbox_id VARCHAR(36) NOT NULL,
    opened_at BIGINT      NOT NULL,
    items     BIGINT      NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE engagement_digest_items (
    trigger_id  VARCHAR(64)  NOT NULL,
    rule_id     VARCHAR(64)  NOT NULL,
    outbox_id   VARCHAR(36)  NOT NULL,
    user_id     VARCHAR(255) NOT NULL,
    payload     MEDIUMTEXT   NOT NULL,
    occurred_at BIGINT       NOT NULL,
    created_at  BIGINT       NOT NULL,
    PRIMARY KEY (trigger_id, rule_id),
    KEY engagement_digest_items_outbox (outbox_id, occurred_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The end user's own choices from the preference center (category ->
-- channel -> on/off), kept apart from the host's `preferences` so a host's
-- PUT /v1/users never undoes them.
ALTER TABLE engagement_recipients ADD COLUMN user_preferences TEXT;

-- A user's preference changes, read on their send-log page.
CREATE INDEX engagement_audit_log_target ON engagement_audit_log (target, id);
