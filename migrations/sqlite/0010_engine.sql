-- The engine at full speed (issue 12): positions in commit order for the
-- event and inbox streams, and indexes that keep every hot-path and list
-- query's cost flat as the tables grow. See the PostgreSQL file for why
-- positions come from a counter row; SQLite has one writer at a time, so
-- there it is simply the order of writes.
CREATE TABLE engagement_sequences (
    name TEXT    NOT NULL PRIMARY KEY,
    last INTEGER NOT NULL
);

-- Events are read and pruned by position only, so it becomes the primary
-- key (the rowid): one b-tree per event instead of two. SQLite cannot
-- change a primary key in place, so the table is rebuilt.
CREATE TABLE engagement_events_new (
    position   INTEGER NOT NULL PRIMARY KEY,
    id         TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    user_id    TEXT,
    outbox_id  TEXT,
    payload    TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO engagement_events_new (position, id, kind, user_id, outbox_id, payload, created_at)
  SELECT row_number() OVER (ORDER BY id), id, kind, user_id, outbox_id, payload, created_at FROM engagement_events;
DROP TABLE engagement_events;
ALTER TABLE engagement_events_new RENAME TO engagement_events;

ALTER TABLE engagement_inbox ADD COLUMN position INTEGER;
UPDATE engagement_inbox SET position = n.rn + (SELECT COUNT(*) FROM engagement_events)
  FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM engagement_inbox) AS n
  WHERE engagement_inbox.id = n.id;
INSERT INTO engagement_sequences (name, last)
  VALUES ('stream', (SELECT COUNT(*) FROM engagement_events) + (SELECT COUNT(*) FROM engagement_inbox));

DROP INDEX engagement_inbox_user;
DROP INDEX engagement_inbox_user_id;
CREATE UNIQUE INDEX engagement_inbox_user_position ON engagement_inbox (user_id, position);
CREATE INDEX engagement_inbox_archived ON engagement_inbox (archived_at) WHERE archived_at IS NOT NULL;

DROP INDEX engagement_outbox_due;
CREATE INDEX engagement_outbox_due ON engagement_outbox (due_at) WHERE status = 'scheduled';
-- each channel's queue (the worker's lanes: a backlog on one channel never
-- stands in front of another's rows)
CREATE INDEX engagement_outbox_due_channel ON engagement_outbox (channel, due_at) WHERE status = 'scheduled';
DROP INDEX engagement_outbox_claimed;
CREATE INDEX engagement_outbox_status ON engagement_outbox (status, id);
DROP INDEX engagement_outbox_user;
CREATE INDEX engagement_outbox_user ON engagement_outbox (user_id, id);
DROP INDEX engagement_outbox_rule;
CREATE INDEX engagement_outbox_rule ON engagement_outbox (rule_id, id);
CREATE INDEX engagement_outbox_rule_scheduled ON engagement_outbox (rule_id) WHERE status = 'scheduled';

DROP INDEX engagement_sends_address;
CREATE INDEX engagement_sends_address ON engagement_sends (address_hash, created_at) WHERE address_hash IS NOT NULL;
DROP INDEX engagement_sends_created;
