-- Instance leases (issue 17): see the PostgreSQL file.
CREATE TABLE engagement_instances (
    id         TEXT    NOT NULL PRIMARY KEY,
    host       TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    renewed_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

ALTER TABLE engagement_outbox ADD COLUMN claimed_by TEXT;
