-- Retention (issue 12): planned triggers are pruned oldest first by their
-- age. Their ids may come from the host (the transactional-outbox contract
-- lets it insert them), so unlike the outbox and the send log an id range
-- is not a time range.
CREATE INDEX engagement_triggers_created ON engagement_triggers (created_at);
