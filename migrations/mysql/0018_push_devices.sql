-- Push devices (issue 29): a user's browsers (Web Push subscriptions) and
-- phones (FCM registration tokens, APNs device tokens). One row per device,
-- keyed by what identifies it to its provider: `device_hash` is the hex
-- SHA-256 of kind, a newline and the address (an endpoint can be longer than
-- MariaDB will index), unique, so the same endpoint registered again, or by
-- another user, finds its row. A removed device keeps its row with who
-- removed it and why (see src/store/push_devices.rs). Devices are state, not
-- history: retention prunes none; deleting the user deletes them.
CREATE TABLE engagement_push_devices (
    id              VARCHAR(36)  NOT NULL PRIMARY KEY,
    user_id         VARCHAR(255) NOT NULL,
    kind            VARCHAR(8)   NOT NULL,
    address         TEXT         NOT NULL,
    device_hash     VARCHAR(64)  NOT NULL,
    p256dh          VARCHAR(128),
    auth            VARCHAR(64),
    label           VARCHAR(200),
    created_at      BIGINT       NOT NULL,
    last_success_at BIGINT,
    removed_at      BIGINT,
    removed_by      VARCHAR(254),
    removed_reason  TEXT,
    UNIQUE KEY engagement_push_devices_hash (device_hash),
    KEY engagement_push_devices_user (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
