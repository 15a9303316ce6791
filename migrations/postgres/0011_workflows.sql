-- Workflows on a rule (issue 14): see the SQLite file for the why.
ALTER TABLE engagement_rules ADD COLUMN workflow TEXT;
ALTER TABLE engagement_recipients ADD COLUMN quiet_hours TEXT;

CREATE TABLE engagement_throttle_slots (
    bucket    TEXT   NOT NULL,
    slot      BIGINT NOT NULL,
    used_at   BIGINT NOT NULL,
    outbox_id TEXT,
    PRIMARY KEY (bucket, slot)
);

CREATE TABLE engagement_digests (
    bucket    TEXT   NOT NULL PRIMARY KEY,
    outbox_id TEXT   NOT NULL,
    opened_at BIGINT NOT NULL,
    items     BIGINT NOT NULL
);
CREATE TABLE engagement_digest_items (
    trigger_id  TEXT   NOT NULL,
    rule_id     TEXT   NOT NULL,
    outbox_id   TEXT   NOT NULL,
    user_id     TEXT   NOT NULL,
    payload     TEXT   NOT NULL,
    occurred_at BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (trigger_id, rule_id)
);
CREATE INDEX engagement_digest_items_outbox ON engagement_digest_items (outbox_id, occurred_at);

-- The end user's own choices from the preference center (category ->
-- channel -> on/off), kept apart from the host's `preferences` so a host's
-- PUT /v1/users never undoes them.
ALTER TABLE engagement_recipients ADD COLUMN user_preferences TEXT;

-- A user's preference changes, read on their send-log page.
CREATE INDEX engagement_audit_log_target ON engagement_audit_log (target, id);
