-- Push devices (issue 29): a user's browsers (Web Push subscriptions) and
-- phones (FCM registration tokens, APNs device tokens). One row per device,
-- keyed by what identifies it to its provider: `device_hash` is the hex
-- SHA-256 of kind, a newline and the address (an endpoint can be longer than
-- MariaDB will index), unique, so the same endpoint registered again, or by
-- another user, finds its row. A removed device keeps its row with who
-- removed it and why (see src/store/push_devices.rs). Devices are state, not
-- history: retention prunes none; deleting the user deletes them.
CREATE TABLE engagement_push_devices (
    id              TEXT    NOT NULL PRIMARY KEY,
    user_id         TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    address         TEXT    NOT NULL,
    device_hash     TEXT    NOT NULL UNIQUE,
    p256dh          TEXT,
    auth            TEXT,
    label           TEXT,
    created_at      BIGINT  NOT NULL,
    last_success_at BIGINT,
    removed_at      BIGINT,
    removed_by      TEXT,
    removed_reason  TEXT
);
CREATE INDEX engagement_push_devices_user ON engagement_push_devices (user_id);
