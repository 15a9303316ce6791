-- Herald's statements on SQLite: recipients: suppressions and API keys.
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
