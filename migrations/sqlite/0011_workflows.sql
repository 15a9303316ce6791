-- Workflows on a rule (issue 14): the send window, digest, frequency cap,
-- escalation and preference-center names of a rule, as one JSON document
-- (NULL for a rule with none of them, so a plain rule reads nothing more);
-- a recipient's quiet hours; and the slots of the frequency caps.
ALTER TABLE engagement_rules ADD COLUMN workflow TEXT;
ALTER TABLE engagement_recipients ADD COLUMN quiet_hours TEXT;

-- A cap of `limit` per `per` seconds is `limit` slots per (scope, user):
-- the bucket is a SHA-256 of the scope and the user id. A message takes a
-- slot whose last use is older than `per` (or the slot already holding it);
-- no free slot means the cap is reached. Slots are taken in a transaction
-- holding the bucket's rows, so two instances never take the same one.
CREATE TABLE engagement_throttle_slots (
    bucket    TEXT    NOT NULL,
    slot      INTEGER NOT NULL,
    used_at   INTEGER NOT NULL,
    outbox_id TEXT,
    PRIMARY KEY (bucket, slot)
);

-- Digests: the digest a rule has open for a user and key (the bucket, a
-- SHA-256 of the three), and which triggers went into which digest message.
-- A trigger is in one digest of a rule, never two (the primary key).
CREATE TABLE engagement_digests (
    bucket    TEXT    NOT NULL PRIMARY KEY,
    outbox_id TEXT    NOT NULL,
    opened_at INTEGER NOT NULL,
    items     INTEGER NOT NULL
);
CREATE TABLE engagement_digest_items (
    trigger_id  TEXT    NOT NULL,
    rule_id     TEXT    NOT NULL,
    outbox_id   TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    occurred_at INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (trigger_id, rule_id)
);
CREATE INDEX engagement_digest_items_outbox ON engagement_digest_items (outbox_id, occurred_at);

-- The end user's own choices from the preference center (category ->
-- channel -> on/off), kept apart from the host's `preferences` so a host's
-- PUT /v1/users never undoes them.
ALTER TABLE engagement_recipients ADD COLUMN user_preferences TEXT;

-- A user's preference changes, read on their send-log page.
CREATE INDEX engagement_audit_log_target ON engagement_audit_log (target, id);
