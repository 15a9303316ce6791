-- Herald's statements on SQLite: push devices (src/store/push_devices.rs).
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs. What MariaDB runs in the same
-- text is in ../shared/push_devices.sql.

-- name: insert_push_device
-- Files a device, or does nothing when its device_hash is taken (the caller
-- then reads the row that holds it: two instances registering one endpoint
-- at once end with one row).
-- binds: id, user_id, kind, address, device_hash, p256dh, auth, label, created_at
INSERT INTO engagement_push_devices (id, user_id, kind, address, device_hash, p256dh, auth, label, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (device_hash) DO NOTHING;

-- name: lock_push_device_by_hash
-- The device that holds a device_hash; SQLite's write transaction already
-- holds the only write lock.
-- binds: device_hash
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE device_hash = ?;

-- name: mark_push_success
-- Records that a provider accepted a notification for these devices (a JSON
-- array of device ids).
-- binds: now, device_ids
UPDATE engagement_push_devices SET last_success_at = ?
 WHERE id IN (SELECT ok.k FROM (SELECT value AS k FROM json_each(?)) AS ok);

-- name: live_push_devices_of
-- Some users' devices that are not removed (`user_ids`, a JSON array of
-- strings), oldest first: a claimed batch's, in one statement.
-- binds: user_ids
SELECT d.id, d.user_id, d.kind, d.address, d.p256dh, d.auth, d.label, d.created_at, d.last_success_at,
       d.removed_at, d.removed_by, d.removed_reason
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_push_devices d ON d.user_id = wanted.k
 WHERE d.removed_at IS NULL
 ORDER BY d.created_at, d.id;
