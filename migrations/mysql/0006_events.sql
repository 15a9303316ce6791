-- Outcome events, appended in the same transaction as what they report: a
-- terminal outcome, a cancellation, a suppression added or lifted. Host
-- applications follow them (GET /v1/events/stream) to keep their own state
-- in sync. Ids are UUIDv7, so id order is append order.
CREATE TABLE engagement_events (
    id         VARCHAR(36)  NOT NULL PRIMARY KEY,
    kind       VARCHAR(32)  NOT NULL,
    user_id    VARCHAR(255),
    outbox_id  VARCHAR(36),
    payload    MEDIUMTEXT   NOT NULL,
    created_at BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
