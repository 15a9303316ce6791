-- SMS delivery reports in the send log (issue 30): two new statuses,
-- `delivered` (the carrier says the handset got it) and `undelivered` (it
-- says it did not), rows the send log gains after a message was `sent`.
--
-- SQLite cannot change a CHECK in place, so the table is rebuilt the way
-- https://www.sqlite.org/lang_altertable.html#otheralter describes: create
-- the new table, copy, drop the old, rename, and create again every index
-- that exists on it after migrations 0001–0020: engagement_sends_user and
-- engagement_sends_outbox (0001), engagement_sends_address (0001, made
-- partial in 0010); engagement_sends_created (0009) was dropped in 0010.
-- No trigger, view or foreign key names the table. The columns keep their
-- order (provider_id last, where 0020's ADD COLUMN put it). The migration
-- runs inside the runner's one IMMEDIATE transaction, so a failure leaves
-- the old table as it was.
CREATE TABLE engagement_sends_new (
    id           TEXT    NOT NULL PRIMARY KEY,
    outbox_id    TEXT    NOT NULL,
    rule_id      TEXT,
    trigger_id   TEXT,
    user_id      TEXT    NOT NULL,
    channel      TEXT    NOT NULL,
    transport    TEXT,
    address_hash TEXT,
    status       TEXT    NOT NULL
                 CHECK (status IN ('sent','failed','suppressed','bounced','expired','cancelled','complained',
                                   'delivered','undelivered')),
    detail       TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    provider_id  TEXT
);
INSERT INTO engagement_sends_new (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash,
                                  status, detail, attempts, created_at, provider_id)
  SELECT id, outbox_id, rule_id, trigger_id, user_id, channel, transport, address_hash,
         status, detail, attempts, created_at, provider_id
    FROM engagement_sends;
DROP TABLE engagement_sends;
ALTER TABLE engagement_sends_new RENAME TO engagement_sends;
CREATE INDEX engagement_sends_user ON engagement_sends (user_id, created_at);
CREATE INDEX engagement_sends_outbox ON engagement_sends (outbox_id);
CREATE INDEX engagement_sends_address ON engagement_sends (address_hash, created_at) WHERE address_hash IS NOT NULL;
