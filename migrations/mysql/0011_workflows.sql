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
