-- Herald's statements on SQLite: recipients, suppressions and API keys.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- -------------------------------------------------------------- suppressions

-- name: insert_suppression
-- Suppresses an address for a category ('*': all), unless it already is
-- (the caller then replaces it where it should).
-- binds: address_hash, category, reason, detail, created_at, expires_at
INSERT INTO engagement_suppressions (address_hash, category, reason, detail, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (address_hash, category) DO NOTHING;

-- name: find_suppression
-- The suppression in force for an address and a category, or for all
-- categories ('*' sorts before letters, so that one is reported when both
-- exist).
-- binds: address_hash, all_categories, category, now
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = ? AND category IN (?, ?) AND (expires_at IS NULL OR expires_at > ?)
 ORDER BY category LIMIT 1;

-- name: suppressions_of_address
-- An address's suppressions.
-- binds: address_hash, limit
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = ? ORDER BY category LIMIT ?;

-- name: list_suppressions
-- The newest suppressions.
-- binds: limit
SELECT address_hash, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 ORDER BY created_at DESC, address_hash LIMIT ?;

-- name: sends_for_address
-- The send log for one address hash, newest first (served by
-- engagement_sends_address).
-- binds: address_hash, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at
  FROM engagement_sends WHERE address_hash = ? ORDER BY created_at DESC, id DESC LIMIT ?;

-- name: outbox_by_dedupe_keys
-- Which rows hold these dedupe keys (a JSON array of strings): after an
-- insert that skipped some, what became of each.
-- binds: keys
SELECT o.id, o.dedupe_key
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_outbox o ON o.dedupe_key = wanted.k;


-- ------------------------------------------------------------------ api keys

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

-- --------------------------------------------------------------- recipients

-- name: insert_recipient
-- Creates a recipient, or does nothing when the row exists; the row count
-- says which (1: created). The database arbitrates two first writers
-- ("update, else insert" let both find no row, and the second failed on
-- the key).
-- binds: user_id, email, name, locale, timezone, preferences, quiet_hours, created_at, updated_at
INSERT INTO engagement_recipients (user_id, email, name, locale, timezone, preferences, quiet_hours,
                                   created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (user_id) DO NOTHING;

-- name: update_recipient
-- Replaces what the host says of a recipient that exists.
-- binds: email, name, locale, timezone, preferences, quiet_hours, updated_at, user_id
UPDATE engagement_recipients SET email = ?, name = ?, locale = ?, timezone = ?, preferences = ?,
                                 quiet_hours = ?, updated_at = ?
 WHERE user_id = ?;

-- name: get_recipient
-- One recipient.
-- binds: user_id
SELECT user_id, email, name, locale, timezone, preferences, quiet_hours, user_preferences, created_at, updated_at
  FROM engagement_recipients WHERE user_id = ?;

-- name: recipients_by_ids
-- The recipients of some users (`user_ids`, a JSON array of strings), those
-- that exist.
-- binds: user_ids
SELECT r.user_id, r.email, r.name, r.locale, r.timezone, r.preferences, r.quiet_hours, r.user_preferences, r.created_at, r.updated_at
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_recipients r ON r.user_id = wanted.k;

-- name: insert_bare_recipient
-- Creates a recipient the host has not described (the preference center's
-- first change), or does nothing when the row exists.
-- binds: user_id, now, now
INSERT INTO engagement_recipients (user_id, preferences, created_at, updated_at) VALUES (?, '{}', ?, ?)
    ON CONFLICT (user_id) DO NOTHING;

-- name: lock_user_choices
-- A user's own choices; SQLite's write transaction already holds the only
-- write lock.
-- binds: user_id
SELECT user_preferences FROM engagement_recipients WHERE user_id = ?;

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

-- name: remember_erased_user
-- Erasure: remembers the user was deleted, so an old inbox token or
-- preference link cannot bring them back.
-- binds: user_id, now
INSERT INTO engagement_erased_users (user_id, erased_at) VALUES (?, ?)
    ON CONFLICT (user_id) DO NOTHING;

-- name: erased_user
-- Whether a user was deleted (and not described again since).
-- binds: user_id
SELECT user_id FROM engagement_erased_users WHERE user_id = ?;

-- name: unerase_user
-- The host describes a deleted user again: their links work again.
-- binds: user_id
DELETE FROM engagement_erased_users WHERE user_id = ?;
