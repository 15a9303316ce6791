-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: push devices (src/store/push_devices.rs).
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/push_devices.sql and mariadb/push_devices.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: reclaim_push_device
-- Gives a known device to a user, with its new keys (and label, when one
-- is given), and lifts its removal.
-- binds: user_id, p256dh, auth, label, id
UPDATE engagement_push_devices
   SET user_id = ?, p256dh = ?, auth = ?, label = COALESCE(?, label),
       removed_at = NULL, removed_by = NULL, removed_reason = NULL
 WHERE id = ?;

-- name: push_device_by_id
-- One device, removed or not.
-- binds: id
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE id = ?;

-- name: live_push_devices
-- A user's devices that are not removed, oldest first.
-- binds: user_id
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE user_id = ? AND removed_at IS NULL
 ORDER BY created_at, id;

-- name: all_push_devices
-- A user's devices, removed ones too, oldest first.
-- binds: user_id
SELECT id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
       removed_at, removed_by, removed_reason
  FROM engagement_push_devices
 WHERE user_id = ?
 ORDER BY created_at, id;

-- name: remove_push_device
-- Marks one of a user's live devices removed, with who and why.
-- binds: now, by, reason, id, user_id
UPDATE engagement_push_devices
   SET removed_at = ?, removed_by = ?, removed_reason = ?
 WHERE id = ? AND user_id = ? AND removed_at IS NULL;

-- name: delete_user_push_devices
-- Erasure: a user's devices, removed ones too.
-- binds: user_id
DELETE FROM engagement_push_devices WHERE user_id = ?;
