-- The engine at full speed (issue 12): positions in commit order for the
-- event and inbox streams, and indexes that keep every hot-path and list
-- query's cost flat as the tables grow.
--
-- A position is taken from engagement_sequences in the same transaction as
-- the row it numbers, by an UPDATE of the counter row: the row lock holds
-- every other writer of positions back until this transaction commits, so
-- positions are handed out in commit order and a follower reading
-- "position > last" can never skip a row that commits late. (UUIDv7 ids are
-- taken before commit and concurrent transactions commit out of id order.)
CREATE TABLE engagement_sequences (
    name TEXT   NOT NULL PRIMARY KEY,
    last BIGINT NOT NULL
);

-- Events are read and pruned by position only, so it becomes the primary
-- key: one index per event instead of two. (A follower of an older version
-- that resumes with an event id finds it by a scan, once.)
ALTER TABLE engagement_events ADD COLUMN position BIGINT;
UPDATE engagement_events e SET position = n.rn
  FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM engagement_events) n WHERE e.id = n.id;
ALTER TABLE engagement_events ALTER COLUMN position SET NOT NULL;
ALTER TABLE engagement_events DROP CONSTRAINT engagement_events_pkey;
ALTER TABLE engagement_events ADD PRIMARY KEY (position);

ALTER TABLE engagement_inbox ADD COLUMN position BIGINT;
UPDATE engagement_inbox i SET position = n.rn + (SELECT COUNT(*) FROM engagement_events)
  FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM engagement_inbox) n WHERE i.id = n.id;
ALTER TABLE engagement_inbox ALTER COLUMN position SET NOT NULL;
INSERT INTO engagement_sequences (name, last)
  VALUES ('stream', (SELECT COUNT(*) FROM engagement_events) + (SELECT COUNT(*) FROM engagement_inbox));

-- The inbox pages and streams a user's messages by position.
DROP INDEX engagement_inbox_user;
DROP INDEX engagement_inbox_user_id;
CREATE UNIQUE INDEX engagement_inbox_user_position ON engagement_inbox (user_id, position);
-- retention: archived messages by age (only archived rows are in it)
CREATE INDEX engagement_inbox_archived ON engagement_inbox (archived_at) WHERE archived_at IS NOT NULL;

-- The outbox. PostgreSQL writes a new version of a row on every status
-- change and adds it to every index whose predicate it satisfies, so the
-- claim's index holds only scheduled rows: a claim never walks past the
-- millions of rows that are done.
DROP INDEX engagement_outbox_due;
CREATE INDEX engagement_outbox_due ON engagement_outbox (due_at) WHERE status = 'scheduled';
-- each channel's queue (the worker's lanes: a backlog on one channel never
-- stands in front of another's rows)
CREATE INDEX engagement_outbox_due_channel ON engagement_outbox (channel, due_at) WHERE status = 'scheduled';
-- the list screens (status filter, newest first) and the stale reclaim
-- (few rows are ever 'sending')
DROP INDEX engagement_outbox_claimed;
CREATE INDEX engagement_outbox_status ON engagement_outbox (status, id);
DROP INDEX engagement_outbox_user;
CREATE INDEX engagement_outbox_user ON engagement_outbox (user_id, id);
DROP INDEX engagement_outbox_rule;
CREATE INDEX engagement_outbox_rule ON engagement_outbox (rule_id, id);
-- cancelling a rule's scheduled rows: entries only while a row is scheduled
CREATE INDEX engagement_outbox_rule_scheduled ON engagement_outbox (rule_id) WHERE status = 'scheduled';

-- The send log: only email outcomes carry an address hash. Ids are UUIDv7,
-- so the primary key already orders rows by time: recent counts and
-- retention read id ranges, and the created_at index goes.
DROP INDEX engagement_sends_address;
CREATE INDEX engagement_sends_address ON engagement_sends (address_hash, created_at) WHERE address_hash IS NOT NULL;
DROP INDEX engagement_sends_created;
