-- Escalation (issue 14): an inbox message's follow-up is no longer planned
-- as a second outbox row with the message. The message's row keeps when
-- its follow-up falls due, and the worker plans the follow-up row then
-- (one column and one partial index entry per escalating message instead
-- of a whole row with nine index entries, written at intake).
ALTER TABLE engagement_outbox ADD COLUMN follow_up_at BIGINT;
CREATE INDEX engagement_outbox_follow_up ON engagement_outbox (follow_up_at) WHERE follow_up_at IS NOT NULL;
