-- Herald's statements on PostgreSQL: recipients, suppressions and API keys.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- -------------------------------------------------------------- suppressions

-- name: insert_suppression
-- Suppresses an address for a category ('*': all), unless it already is
-- (the caller then replaces it where it should).
-- binds: address_hash, address_kind, category, reason, detail, created_at, expires_at
INSERT INTO engagement_suppressions (address_hash, address_kind, category, reason, detail, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (address_hash, category) DO NOTHING;

-- name: find_suppression
-- The suppression in force for an address and a category, or for all
-- categories ('*' sorts before letters, so that one is reported when both
-- exist).
-- binds: address_hash, all_categories, category, now
SELECT address_hash, address_kind, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = $1 AND category IN ($2, $3) AND (expires_at IS NULL OR expires_at > $4)
 ORDER BY category LIMIT 1;

-- name: suppressions_of_address
-- An address's suppressions.
-- binds: address_hash, limit
SELECT address_hash, address_kind, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 WHERE address_hash = $1 ORDER BY category LIMIT $2;

-- name: list_suppressions
-- The newest suppressions.
-- binds: limit
SELECT address_hash, address_kind, category, reason, detail, created_at, expires_at FROM engagement_suppressions
 ORDER BY created_at DESC, address_hash LIMIT $1;

-- name: sends_for_address
-- The send log for one address hash, newest first (served by
-- engagement_sends_address).
-- binds: address_hash, limit
SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash, status, detail, attempts, created_at, provider_id
  FROM engagement_sends WHERE address_hash = $1 ORDER BY created_at DESC, id DESC LIMIT $2;

-- name: outbox_by_dedupe_keys
-- Which rows hold these dedupe keys (a JSON array of strings): after an
-- insert that skipped some, what became of each.
-- binds: keys
SELECT o.id, o.dedupe_key
  FROM engagement_outbox o
 WHERE o.dedupe_key = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));


-- ------------------------------------------------------------------ api keys

-- name: insert_api_key
-- Adds an API key (its hash, never the key).
-- binds: id, name, key_hash, prefix, created_at, revoked_at
INSERT INTO engagement_api_keys (id, name, key_hash, prefix, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6);

-- name: api_key_by_hash
-- The key a request presents, by its hash: every API call's authentication.
-- binds: key_hash
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys WHERE key_hash = $1;

-- name: list_api_keys
-- Every API key, oldest first.
-- binds:
SELECT id, name, key_hash, prefix, created_at, revoked_at FROM engagement_api_keys ORDER BY created_at, id;

-- name: revoke_api_key
-- Revokes a key (once: a revoked key keeps when it was revoked).
-- binds: now, id
UPDATE engagement_api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL;

-- --------------------------------------------------------------- recipients

-- name: insert_recipient
-- Creates a recipient, or does nothing when the row exists; the row count
-- says which (1: created). The database arbitrates two first writers
-- ("update, else insert" let both find no row, and the second failed on
-- the key).
-- binds: user_id, email, name, locale, timezone, preferences, quiet_hours, phone, phone_hash, slack_user_id, created_at, updated_at
INSERT INTO engagement_recipients (user_id, email, name, locale, timezone, preferences, quiet_hours,
                                   phone, phone_hash, slack_user_id, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
    ON CONFLICT (user_id) DO NOTHING;

-- name: update_recipient
-- Replaces what the host says of a recipient that exists.
-- binds: email, name, locale, timezone, preferences, quiet_hours, phone, phone_hash, slack_user_id, updated_at, user_id
UPDATE engagement_recipients SET email = $1, name = $2, locale = $3, timezone = $4, preferences = $5,
                                 quiet_hours = $6, phone = $7, phone_hash = $8, slack_user_id = $9, updated_at = $10
 WHERE user_id = $11;

-- name: get_recipient
-- One recipient.
-- binds: user_id
SELECT user_id, email, name, locale, timezone, preferences, quiet_hours, phone, slack_user_id, user_preferences,
       created_at, updated_at
  FROM engagement_recipients WHERE user_id = $1;

-- name: recipients_by_ids
-- The recipients of some users (`user_ids`, a JSON array of strings), those
-- that exist.
-- binds: user_ids
SELECT r.user_id, r.email, r.name, r.locale, r.timezone, r.preferences, r.quiet_hours, r.phone, r.slack_user_id,
       r.user_preferences, r.created_at, r.updated_at
  FROM engagement_recipients r
 WHERE r.user_id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: recipients_by_phone_hash
-- The users whose phone has this address hash, for a search by phone
-- (served by engagement_recipients_phone_hash).
-- binds: phone_hash, limit
SELECT user_id FROM engagement_recipients WHERE phone_hash = $1 ORDER BY user_id LIMIT $2;

-- name: insert_bare_recipient
-- Creates a recipient the host has not described (the preference center's
-- first change), or does nothing when the row exists.
-- binds: user_id, now, now
INSERT INTO engagement_recipients (user_id, preferences, created_at, updated_at) VALUES ($1, '{}', $2, $3)
    ON CONFLICT (user_id) DO NOTHING;

-- name: lock_user_choices
-- A user's own choices, the row locked: every other change to them waits
-- here until this one commits, and then reads what it wrote.
-- binds: user_id
SELECT user_preferences FROM engagement_recipients WHERE user_id = $1
   FOR UPDATE;

-- name: update_user_choices
-- Stores a user's own choices (a JSON object), merged.
-- binds: choices, now, user_id
UPDATE engagement_recipients SET user_preferences = $1, updated_at = $2 WHERE user_id = $3;

-- name: delete_user_inbox
-- Erasure: a user's inbox.
-- binds: user_id
DELETE FROM engagement_inbox WHERE user_id = $1;

-- name: delete_recipient
-- Erasure: a user's recipient row (address, name, preferences).
-- binds: user_id
DELETE FROM engagement_recipients WHERE user_id = $1;

-- name: remember_erased_user
-- Erasure: remembers the user was deleted, so an old inbox token or
-- preference link cannot bring them back.
-- binds: user_id, now
INSERT INTO engagement_erased_users (user_id, erased_at) VALUES ($1, $2)
    ON CONFLICT (user_id) DO NOTHING;

-- name: erased_user
-- Whether a user was deleted (and not described again since).
-- binds: user_id
SELECT user_id FROM engagement_erased_users WHERE user_id = $1;

-- name: unerase_user
-- The host describes a deleted user again: their links work again.
-- binds: user_id
DELETE FROM engagement_erased_users WHERE user_id = $1;
