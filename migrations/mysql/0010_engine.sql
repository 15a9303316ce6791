-- The engine at full speed (issue 12): positions in commit order for the
-- event and inbox streams, and indexes that keep every hot-path and list
-- query's cost flat as the tables grow. See the PostgreSQL file for why
-- positions come from a counter row.
--
-- InnoDB secondary indexes end with the primary key and are only touched
-- when their own columns change, so KEY (x) serves "x = ? ORDER BY id".
CREATE TABLE engagement_sequences (
    name VARCHAR(32) NOT NULL PRIMARY KEY,
    last BIGINT      NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

ALTER TABLE engagement_events ADD COLUMN position BIGINT NULL;
UPDATE engagement_events e
  JOIN (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS rn FROM engagement_events) n ON e.id = n.id
  SET e.position = n.rn;
-- Events are read and pruned by position only, so it becomes the primary
-- key (InnoDB's clustered index: appends at its end).
ALTER TABLE engagement_events MODIFY position BIGINT NOT NULL, DROP PRIMARY KEY, ADD PRIMARY KEY (position);

ALTER TABLE engagement_inbox ADD COLUMN position BIGINT NULL;
UPDATE engagement_inbox i
  JOIN (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS rn FROM engagement_inbox) n ON i.id = n.id
  SET i.position = n.rn + (SELECT COUNT(*) FROM engagement_events);
INSERT INTO engagement_sequences (name, last)
  VALUES ('stream', (SELECT COUNT(*) FROM engagement_events) + (SELECT COUNT(*) FROM engagement_inbox));
ALTER TABLE engagement_inbox MODIFY position BIGINT NOT NULL,
  DROP KEY engagement_inbox_user, DROP KEY engagement_inbox_user_id,
  ADD UNIQUE KEY engagement_inbox_user_position (user_id, position),
  ADD KEY engagement_inbox_archived (archived_at);

-- The claim keeps (status, due_at); the list screens and the stale reclaim
-- (few rows are ever 'sending') use (status); the user and rule screens
-- (user_id) and (rule_id), newest first. (rule_id) replaces (rule_id,
-- status), which every status change had to update; cancelling a rule's
-- scheduled rows now reads that rule's rows, an operator action, not a
-- per-message one.
ALTER TABLE engagement_outbox
  ADD KEY engagement_outbox_due_channel (status, channel, due_at),
  DROP KEY engagement_outbox_claimed, ADD KEY engagement_outbox_status (status),
  DROP KEY engagement_outbox_user, ADD KEY engagement_outbox_user (user_id),
  DROP KEY engagement_outbox_rule, ADD KEY engagement_outbox_rule (rule_id);

-- The send log's ids are UUIDv7, so its primary key already orders rows by
-- time: recent counts and retention read id ranges.
DROP INDEX engagement_sends_created ON engagement_sends;
