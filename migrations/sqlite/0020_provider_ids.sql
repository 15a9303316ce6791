-- The provider's own id for a message (issue 30, "provider ids
-- everywhere"): the email's Message-ID, Twilio's SM… sid, Slack's ts, a
-- push service's message id. Its own column rather than words in
-- `detail`, so an operator can copy it into the provider's console and a
-- later report (Twilio's status callback) can be matched to it. NULL for
-- rows written before, and for outcomes that are not a hand-over.
ALTER TABLE engagement_sends ADD COLUMN provider_id TEXT;
