-- SMS delivery reports in the send log (issue 30): two new statuses,
-- `delivered` (the carrier says the handset got it) and `undelivered` (it
-- says it did not), rows the send log gains after a message was `sent`.
--
-- 0001's column CHECK has PostgreSQL's default name,
-- engagement_sends_status_check. Dropped and added again in the runner's
-- transaction, so no moment sees the table unchecked; adding it scans the
-- send log once to validate the rows already there (NOT VALID would skip
-- that, but every row already passes the narrower list, and a constraint
-- left unvalidated would be one more thing to explain).
ALTER TABLE engagement_sends DROP CONSTRAINT engagement_sends_status_check;
ALTER TABLE engagement_sends ADD CONSTRAINT engagement_sends_status_check
    CHECK (status IN ('sent','failed','suppressed','bounced','expired','cancelled','complained',
                      'delivered','undelivered'));
