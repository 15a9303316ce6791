-- Keys compare bytes (COLLATE "C"), as they do on SQLite (BINARY) and
-- MariaDB (utf8mb4_bin). Every text column that is part of an index moves
-- to the "C" collation, so that:
--   - an index's comparisons are a memcmp, not the database's locale
--     (strcoll). Under the machine's C.UTF-8 `perf` of a 1,000,000-recipient
--     fan-out found a sixth of PostgreSQL's CPU in `varstr_cmp`/`strcoll`;
--     a database created with en_US.UTF-8, the usual default, costs more.
--   - the order of a cursor (a topic's subscribers, a user's topics, the
--     expansion's user-id order) is the same on all three databases, and
--     does not depend on how the host's database was created.
-- Equality is unchanged (every collation here is deterministic), and a
-- comparison between one of these columns and a value or column in the
-- database's default collation takes "C": PostgreSQL lets a column's own
-- collation win over the default. Changing a column's collation keeps the
-- table and rebuilds the indexes that hold it.
-- tests/store_conformance.rs (every_indexed_text_column_compares_bytes)
-- checks that no indexed text column is left in another collation, this
-- migration's and every later one's.
ALTER TABLE engagement_api_keys
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN key_hash TYPE text COLLATE "C";
ALTER TABLE engagement_audit_log
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN target TYPE text COLLATE "C";
ALTER TABLE engagement_bounces
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN fingerprint TYPE text COLLATE "C",
  ALTER COLUMN kind TYPE text COLLATE "C",
  ALTER COLUMN address_hash TYPE text COLLATE "C";
ALTER TABLE engagement_digest_items
  ALTER COLUMN trigger_id TYPE text COLLATE "C",
  ALTER COLUMN rule_id TYPE text COLLATE "C",
  ALTER COLUMN outbox_id TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C";
ALTER TABLE engagement_digests
  ALTER COLUMN bucket TYPE text COLLATE "C";
ALTER TABLE engagement_erased_users
  ALTER COLUMN user_id TYPE text COLLATE "C";
ALTER TABLE engagement_inbox
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN outbox_id TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C";
ALTER TABLE engagement_instances
  ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE engagement_login_attempts
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN email TYPE text COLLATE "C",
  ALTER COLUMN ip TYPE text COLLATE "C";
ALTER TABLE engagement_operator_sessions
  ALTER COLUMN token_hash TYPE text COLLATE "C",
  ALTER COLUMN operator_id TYPE text COLLATE "C";
ALTER TABLE engagement_operators
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN email TYPE text COLLATE "C";
ALTER TABLE engagement_outbox
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN dedupe_key TYPE text COLLATE "C",
  ALTER COLUMN rule_id TYPE text COLLATE "C",
  ALTER COLUMN trigger_id TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C",
  ALTER COLUMN channel TYPE text COLLATE "C",
  ALTER COLUMN status TYPE text COLLATE "C";
ALTER TABLE engagement_push_devices
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C",
  ALTER COLUMN device_hash TYPE text COLLATE "C";
ALTER TABLE engagement_recipients
  ALTER COLUMN user_id TYPE text COLLATE "C",
  ALTER COLUMN phone_hash TYPE text COLLATE "C";
ALTER TABLE engagement_rules
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN trigger_type TYPE text COLLATE "C";
ALTER TABLE engagement_sends
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN outbox_id TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C",
  ALTER COLUMN address_hash TYPE text COLLATE "C";
ALTER TABLE engagement_sequences
  ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE engagement_suppression_lifts
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN address_hash TYPE text COLLATE "C";
ALTER TABLE engagement_suppressions
  ALTER COLUMN address_hash TYPE text COLLATE "C",
  ALTER COLUMN category TYPE text COLLATE "C";
ALTER TABLE engagement_throttle_slots
  ALTER COLUMN bucket TYPE text COLLATE "C";
ALTER TABLE engagement_topic_subscriptions
  ALTER COLUMN topic_key TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C";
ALTER TABLE engagement_topics
  ALTER COLUMN topic_key TYPE text COLLATE "C";
ALTER TABLE engagement_trigger_users
  ALTER COLUMN trigger_id TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C";
ALTER TABLE engagement_triggers
  ALTER COLUMN id TYPE text COLLATE "C",
  ALTER COLUMN type TYPE text COLLATE "C",
  ALTER COLUMN user_id TYPE text COLLATE "C",
  ALTER COLUMN idempotency_key TYPE text COLLATE "C";
ALTER TABLE engagement_webhook_tokens
  ALTER COLUMN token TYPE text COLLATE "C";
