-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: recipients.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/recipients.sql and mariadb/recipients.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: find_suppression
-- The suppression in force for an address and a category, or for all
-- categories ('*' sorts before letters, so that one is reported when both
-- exist).
-- binds: address_hash, all_categories, category, now
SELECT address_hash, address_kind, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = ? AND category IN (?, ?) AND (expires_at IS NULL OR expires_at > ?)
 ORDER BY category LIMIT 1;

-- name: suppressions_of_address
-- An address's suppressions.
-- binds: address_hash, limit
SELECT address_hash, address_kind, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = ? ORDER BY category LIMIT ?;

-- name: list_suppressions
-- The newest suppressions.
-- binds: limit
SELECT address_hash, address_kind, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 ORDER BY created_at DESC, address_hash LIMIT ?;

-- name: sends_for_address
-- The send log for one address hash, newest first (served by
-- engagement_sends_address).
-- binds: address_hash, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at, provider_id
  FROM engagement_sends WHERE address_hash = ? ORDER BY created_at DESC, id DESC LIMIT ?;

-- name: insert_api_key
-- Adds an API key (its hash, never the key).
-- binds: id, name, key_hash, prefix, created_at, revoked_at
INSERT INTO engagement_api_keys (id, name, key_hash, prefix, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?);

-- name: api_key_by_hash
-- The key a request presents, by its hash: every API call's authentication.
-- binds: key_hash
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys WHERE key_hash = ?;

-- name: list_api_keys
-- Every API key, oldest first.
-- binds:
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys ORDER BY created_at, id;

-- name: revoke_api_key
-- Revokes a key (once: a revoked key keeps when it was revoked).
-- binds: now, id
UPDATE engagement_api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL;

-- name: update_recipient
-- Replaces what the host says of a recipient that exists.
-- binds: email, name, locale, timezone, preferences, quiet_hours, phone, phone_hash, slack_user_id, updated_at, user_id
UPDATE engagement_recipients SET email = ?, name = ?, locale = ?, timezone = ?, preferences = ?,
                                 quiet_hours = ?, phone = ?, phone_hash = ?, slack_user_id = ?, updated_at = ?
 WHERE user_id = ?;

-- name: get_recipient
-- One recipient.
-- binds: user_id
SELECT user_id, email, name, locale, timezone, preferences, quiet_hours, phone, slack_user_id, user_preferences,
       created_at, updated_at
  FROM engagement_recipients WHERE user_id = ?;

-- name: recipients_by_phone_hash
-- The users whose phone has this address hash, for a search by phone
-- (served by engagement_recipients_phone_hash).
-- binds: phone_hash, limit
SELECT user_id FROM engagement_recipients WHERE phone_hash = ? ORDER BY user_id LIMIT ?;

-- name: update_user_choices
-- Stores a user's own choices (a JSON object), merged.
-- binds: choices, now, user_id
UPDATE engagement_recipients SET user_preferences = ?, updated_at = ? WHERE user_id = ?;

-- name: delete_user_inbox
-- Erasure: a user's inbox.
-- binds: user_id
DELETE FROM engagement_inbox WHERE user_id = ?;

-- name: delete_recipient
-- Erasure: a user's recipient row (address, name, preferences).
-- binds: user_id
DELETE FROM engagement_recipients WHERE user_id = ?;

-- name: erased_user
-- Whether a user was deleted (and not described again since).
-- binds: user_id
SELECT user_id FROM engagement_erased_users WHERE user_id = ?;

-- name: unerase_user
-- The host describes a deleted user again: their links work again.
-- binds: user_id
DELETE FROM engagement_erased_users WHERE user_id = ?;
