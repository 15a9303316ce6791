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
