-- Herald's statements on PostgreSQL: push devices (src/store/push_devices.rs).
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- name: reclaim_push_device
-- Gives a known device to a user, with its new keys (and label, when one
-- is given), and lifts its removal.
-- binds: user_id, p256dh, auth, label, id
UPDATE engagement_push_devices
   SET user_id = $1, p256dh = $2, auth = $3, label = COALESCE($4, label),
       removed_at = NULL, removed_by = NULL, removed_reason = NULL
 WHERE id = $5;

-- name: push_device_by_id
-- One device, removed or not.
-- binds: id
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE id = $1;

-- name: live_push_devices
-- A user's devices that are not removed, oldest first.
-- binds: user_id
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE user_id = $1 AND removed_at IS NULL
 ORDER BY created_at, id;

-- name: all_push_devices
-- A user's devices, removed ones too, oldest first.
-- binds: user_id
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE user_id = $1
 ORDER BY created_at, id;

-- name: remove_push_device
-- Marks one of a user's live devices removed, with who and why.
-- binds: now, by, reason, id, user_id
UPDATE engagement_push_devices
   SET removed_at = $1, removed_by = $2, removed_reason = $3
 WHERE id = $4 AND user_id = $5 AND removed_at IS NULL;

-- name: delete_user_push_devices
-- Erasure: a user's devices, removed ones too.
-- binds: user_id
DELETE FROM engagement_push_devices WHERE user_id = $1;

-- name: insert_push_device
-- Files a device, or does nothing when its device_hash is taken (the caller
-- then reads the row that holds it: two instances registering one endpoint
-- at once end with one row).
-- binds: id, user_id, kind, address, device_hash, p256dh, auth, label, created_at
INSERT INTO engagement_push_devices (id, user_id, kind, address, device_hash, p256dh, auth, label, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    ON CONFLICT (device_hash) DO NOTHING;

-- name: lock_push_device_by_hash
-- The device that holds a device_hash, locked until the registration
-- commits.
-- binds: device_hash
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE device_hash = $1
   FOR UPDATE;

-- name: mark_push_success
-- Records that a provider accepted a notification for these devices (a JSON
-- array of device ids).
-- binds: now, device_ids
UPDATE engagement_push_devices SET last_success_at = $1
 WHERE id IN (SELECT ok.k FROM jsonb_array_elements_text(CAST($2 AS jsonb)) AS ok (k));

-- name: live_push_devices_of
-- Some users' devices that are not removed (`user_ids`, a JSON array of
-- strings), oldest first: a claimed batch's, in one statement.
-- binds: user_ids
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb)))) AND removed_at IS NULL
 ORDER BY created_at, id;
