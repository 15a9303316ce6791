-- The outbox's per-row cost (issue 12). PostgreSQL writes a new version of
-- a row when its status changes and adds an entry for it to every index
-- whose predicate the new version satisfies. Finished rows are almost all
-- 'sent', and the lists that filter by status find 'sent' rows fastest on
-- the primary key (nearly every row is one), so the status index keeps
-- only the other statuses: the rows in flight and the rare failures.
-- Queries served by it say `status <> 'sent'` beside their own status
-- test: with the status bound as a parameter (a prepared statement's
-- generic plan) PostgreSQL could not prove the predicate by itself.
-- Rows enqueued without a rule or a trigger (POST /v1/messages) have no
-- entry in those two indexes. `herald bench --rows 50000`, PostgreSQL,
-- alternating with the previous indexes: drain 14,300 -> 15,300 rows/s
-- (medians of five).
DROP INDEX engagement_outbox_status;
CREATE INDEX engagement_outbox_status ON engagement_outbox (status, id) WHERE status <> 'sent';
DROP INDEX engagement_outbox_rule;
CREATE INDEX engagement_outbox_rule ON engagement_outbox (rule_id, id) WHERE rule_id IS NOT NULL;
DROP INDEX engagement_outbox_trigger;
CREATE INDEX engagement_outbox_trigger ON engagement_outbox (trigger_id) WHERE trigger_id IS NOT NULL;
