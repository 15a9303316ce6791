-- SMS delivery reports in the send log (issue 30): two new statuses,
-- `delivered` (the carrier says the handset got it) and `undelivered` (it
-- says it did not), rows the send log gains after a message was `sent`.
--
-- 0001 wrote the CHECK on the column. MariaDB lists such a check in
-- information_schema.CHECK_CONSTRAINTS under the column's name (`status`,
-- LEVEL 'Column') but `DROP CONSTRAINT status` does not find it: a column
-- check belongs to the column definition, and redefining the column
-- replaces it (checked on MariaDB 10.11 with SHOW CREATE TABLE). The column
-- keeps its type (VARCHAR(16) holds 'undelivered') and NOT NULL, so
-- MariaDB changes it without copying the table (10.11 accepts this very
-- statement with ALGORITHM=NOCOPY; it is left to choose, so a server that
-- cannot do that copies instead of refusing). Oracle MySQL 8 names a
-- column check as a table constraint (engagement_sends_chk_1) and would keep
-- it beside the new one; Herald is built and tested on MariaDB, and this
-- file follows it (not tried on MySQL 8).
ALTER TABLE engagement_sends MODIFY COLUMN status VARCHAR(16) NOT NULL
    CHECK (status IN ('sent','failed','suppressed','bounced','expired','cancelled','complained',
                      'delivered','undelivered'));
