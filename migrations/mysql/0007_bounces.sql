-- Bounces and complaints as evidence: what arrived, what it was matched to,
-- and a bounded copy of the raw input. The fingerprint (SHA-256 of the raw
-- message and the recipient) makes ingestion idempotent.
CREATE TABLE engagement_bounces (
    id           VARCHAR(36)  NOT NULL PRIMARY KEY,
    fingerprint  VARCHAR(64)  NOT NULL,
    provider     VARCHAR(32)  NOT NULL,
    kind         VARCHAR(16)  NOT NULL,
    address_hash VARCHAR(64),
    status       VARCHAR(16),
    reply_code   BIGINT,
    detail       TEXT,
    outbox_id    VARCHAR(36),
    matched_by   VARCHAR(32),
    raw_excerpt  MEDIUMTEXT,
    created_at   BIGINT       NOT NULL,
    UNIQUE KEY engagement_bounces_fingerprint (fingerprint),
    KEY engagement_bounces_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
