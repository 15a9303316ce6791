-- Instance leases (issue 17). Each `herald serve` renews a row here on the
-- database's clock; each claim names the instance holding it, so the rows
-- of an instance whose lease lapsed (killed, or cut off from the database)
-- are taken back after the lease plus worker.deliver_timeout instead of
-- after worker.stale.
CREATE TABLE engagement_instances (
    id         TEXT   NOT NULL PRIMARY KEY,
    host       TEXT   NOT NULL,
    pid        BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    renewed_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

-- The instance that last claimed the row (NULL: never claimed, or claimed
-- by a process without a lease, such as a test or `herald bench`). The
-- rescue reads it only on 'sending' rows, found through the status index.
ALTER TABLE engagement_outbox ADD COLUMN claimed_by TEXT;
