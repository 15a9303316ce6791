-- The end-user inbox API pages and streams a user's messages by id (UUIDv7,
-- so id order is creation order).
CREATE INDEX engagement_inbox_user_id ON engagement_inbox (user_id, id);
