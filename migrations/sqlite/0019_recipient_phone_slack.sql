-- Phone numbers and Slack ids on recipients (issue 30), for the SMS and
-- Slack channels. `phone` is E.164 (`+14155550101`), normalised by
-- PUT /v1/users before it is stored; `slack_user_id` is `U…` or `W…`.
-- `phone_hash` is the phone's address hash (as the send log and the
-- suppressions key it), so `herald sends --phone` and the screen's search
-- find the user from the one hash they search everything else by; the
-- partial index holds only users who have a phone.
ALTER TABLE engagement_recipients ADD COLUMN phone TEXT;
ALTER TABLE engagement_recipients ADD COLUMN phone_hash TEXT;
ALTER TABLE engagement_recipients ADD COLUMN slack_user_id TEXT;
CREATE INDEX engagement_recipients_phone_hash ON engagement_recipients (phone_hash) WHERE phone_hash IS NOT NULL;

-- Which kind of address a suppression's hash is of: 'email' (every
-- suppression before this migration) or 'phone'. The hash alone cannot
-- say, and an operator reading the list must.
ALTER TABLE engagement_suppressions ADD COLUMN address_kind TEXT NOT NULL DEFAULT 'email';
