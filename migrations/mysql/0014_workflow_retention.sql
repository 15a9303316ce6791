-- Retention of the workflow tables (issue 14): closed digests, the digest
-- items of pruned digest messages and frequency-cap slots too old to count
-- are pruned oldest first, each delete a range of one of these indexes
-- (without them, every pass would scan the whole table to find nothing).
CREATE INDEX engagement_digests_opened ON engagement_digests (opened_at);
CREATE INDEX engagement_digest_items_created ON engagement_digest_items (created_at);
CREATE INDEX engagement_throttle_slots_used ON engagement_throttle_slots (used_at);
