-- Outcome events, appended in the same transaction as what they report: a
-- terminal outcome, a cancellation, a suppression added or lifted. Host
-- applications follow them (GET /v1/events/stream) to keep their own state
-- in sync. Ids are UUIDv7, so id order is append order.
CREATE TABLE engagement_events (
    id         TEXT    NOT NULL PRIMARY KEY,
    kind       TEXT    NOT NULL,
    user_id    TEXT,
    outbox_id  TEXT,
    payload    TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
