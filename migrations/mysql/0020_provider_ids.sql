-- The provider's own id for a message (issue 30, "provider ids
-- everywhere"): the email's Message-ID, Twilio's SM… sid, Slack's ts, a
-- push service's message id. Its own column rather than words in
-- `detail`, so an operator can copy it into the provider's console (nothing
-- looks rows up by it: Twilio's status callbacks carry the row's id). A
-- push to several devices keeps every accepting service's id, space
-- separated, so the column is unbounded text, not a short VARCHAR. NULL
-- for rows written before, and for outcomes that are not a hand-over.
ALTER TABLE engagement_sends ADD COLUMN provider_id TEXT;
