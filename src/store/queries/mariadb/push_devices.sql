-- Herald's statements on MariaDB/MySQL: push devices
-- (src/store/push_devices.rs). How a block reads, and what holds for the
-- whole dialect: README.md beside this file and src/store/queries/mod.rs.
-- What SQLite runs in the same text is in ../shared/push_devices.sql.

-- name: insert_push_device
-- Files a device, or does nothing when its device_hash is taken (the caller
-- then reads the row that holds it: two instances registering one endpoint
-- at once end with one row). `id = id` changes nothing; unlike INSERT IGNORE
-- it turns no other error (a value too long) into a warning.
-- binds: id, user_id, kind, address, device_hash, p256dh, auth, label, created_at
INSERT INTO engagement_push_devices (id, user_id, kind, address, device_hash, p256dh, auth, label, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE id = id;

-- name: lock_push_device_by_hash
-- The device that holds a device_hash, locked until the registration
-- commits.
-- binds: device_hash
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE device_hash = ?
   FOR UPDATE;

-- name: mark_push_success
-- Records that a provider accepted a notification for these devices (a JSON
-- array of device ids).
-- binds: now, device_ids
UPDATE engagement_push_devices SET last_success_at = ?
 WHERE id IN (SELECT ok.k FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS ok);

-- name: live_push_devices_of
-- Some users' devices that are not removed (`user_ids`, a JSON array of
-- strings), oldest first: a claimed batch's, in one statement.
-- binds: user_ids
SELECT d.id, d.user_id, d.kind, d.address, d.p256dh, d.auth, d.label, d.created_at, d.last_success_at,
       d.removed_at, d.removed_by, d.removed_reason
  FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
       STRAIGHT_JOIN engagement_push_devices d ON d.user_id = wanted.k
 WHERE d.removed_at IS NULL
 ORDER BY d.created_at, d.id;
