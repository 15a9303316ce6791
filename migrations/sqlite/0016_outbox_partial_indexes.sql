-- The outbox's per-row cost (issue 12), as on PostgreSQL. SQLite rewrites
-- the entries of the indexes whose columns an update changes; a 'sent' row
-- leaves the status index instead of moving within it. Finished rows are
-- almost all 'sent', and the lists that filter by status find those fastest
-- on the primary key. SQLite uses a partial index only when the query names
-- its WHERE term, so queries served by the status index say
-- `status <> 'sent'` beside their own status test. Rows enqueued without a
-- rule or a trigger have no entry in those two indexes (`x = ?` implies
-- `x IS NOT NULL`, so lookups by rule or trigger still use them).
DROP INDEX engagement_outbox_status;
CREATE INDEX engagement_outbox_status ON engagement_outbox (status, id) WHERE status <> 'sent';
DROP INDEX engagement_outbox_rule;
CREATE INDEX engagement_outbox_rule ON engagement_outbox (rule_id, id) WHERE rule_id IS NOT NULL;
DROP INDEX engagement_outbox_trigger;
CREATE INDEX engagement_outbox_trigger ON engagement_outbox (trigger_id) WHERE trigger_id IS NOT NULL;
