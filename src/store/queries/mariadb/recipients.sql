-- Herald's statements on MariaDB and MySQL: recipients, suppressions and API keys.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- -------------------------------------------------------------- suppressions

-- name: insert_suppression
-- Suppresses an address for a category ('*': all), unless it already is
-- (the caller then replaces it where it should).
-- binds: address_hash, address_kind, category, reason, detail, created_at, expires_at
INSERT INTO engagement_suppressions (address_hash, address_kind, category, reason, detail, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE address_hash = address_hash;

-- name: outbox_by_dedupe_keys
-- Which rows hold these dedupe keys (a JSON array of strings): after an
-- insert that skipped some (MariaDB cannot say which), what became of each.
-- binds: keys
SELECT o.id, o.dedupe_key
  FROM JSON_TABLE(?, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
  STRAIGHT_JOIN engagement_outbox o ON o.dedupe_key = wanted.k;

-- --------------------------------------------------------------- recipients

-- name: insert_recipient
-- Creates a recipient, or does nothing when the row exists; the row count
-- says which (1: created). The database arbitrates two first writers
-- ("update, else insert" let both find no row, and the second failed on
-- the key).
-- MariaDB counts a row "updated" to its own values as affected (sqlx sets
-- CLIENT_FOUND_ROWS), so an existing row's `updated_at` moves by 1 ms (2:
-- updated; update_recipient sets it anyway).
-- binds: user_id, email, name, locale, timezone, preferences, quiet_hours, phone, phone_hash, slack_user_id, created_at, updated_at
INSERT INTO engagement_recipients (user_id, email, name, locale, timezone, preferences, quiet_hours,
                                   phone, phone_hash, slack_user_id, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE updated_at = updated_at + 1;

-- name: recipients_by_ids
-- The recipients of some users (`user_ids`, a JSON array of strings), those
-- that exist.
-- binds: user_ids
SELECT r.user_id, r.email, r.name, r.locale, r.timezone, r.preferences, r.quiet_hours, r.phone, r.slack_user_id,
       r.user_preferences, r.created_at, r.updated_at
  FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS wanted
       STRAIGHT_JOIN engagement_recipients r ON r.user_id = wanted.k;

-- name: insert_bare_recipient
-- Creates a recipient the host has not described (the preference center's
-- first change), or does nothing when the row exists.
-- binds: user_id, now, now
INSERT INTO engagement_recipients (user_id, preferences, created_at, updated_at) VALUES (?, '{}', ?, ?)
    ON DUPLICATE KEY UPDATE user_id = user_id;

-- name: lock_user_choices
-- A user's own choices, the row locked: every other change to them waits
-- here until this one commits, and then reads what it wrote.
-- binds: user_id
SELECT user_preferences FROM engagement_recipients WHERE user_id = ?
   FOR UPDATE;

-- name: remember_erased_user
-- Erasure: remembers the user was deleted, so an old inbox token or
-- preference link cannot bring them back.
-- binds: user_id, now
INSERT INTO engagement_erased_users (user_id, erased_at) VALUES (?, ?)
    ON DUPLICATE KEY UPDATE user_id = user_id;
