-- Phone numbers and Slack ids on recipients (issue 30), for the SMS and
-- Slack channels. `phone` is E.164 (`+14155550101`, at most 16
-- characters), normalised by PUT /v1/users before it is stored;
-- `slack_user_id` is `U…` or `W…` (at most 32). `phone_hash` is the
-- phone's address hash (as the send log and the suppressions key it), so
-- `herald sends --phone` and the screen's search find the user from the
-- one hash they search everything else by. One ALTER: one table rebuild.
ALTER TABLE engagement_recipients
    ADD COLUMN phone         VARCHAR(16) NULL,
    ADD COLUMN phone_hash    VARCHAR(64) NULL,
    ADD COLUMN slack_user_id VARCHAR(32) NULL,
    ADD KEY engagement_recipients_phone_hash (phone_hash);

-- Which kind of address a suppression's hash is of: 'email' (every
-- suppression before this migration) or 'phone'. The hash alone cannot
-- say, and an operator reading the list must.
ALTER TABLE engagement_suppressions ADD COLUMN address_kind VARCHAR(16) NOT NULL DEFAULT 'email';
