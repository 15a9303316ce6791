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
