-- Instance leases (issue 17): see the PostgreSQL file.
CREATE TABLE engagement_instances (
    id         VARCHAR(64)  NOT NULL PRIMARY KEY,
    host       VARCHAR(255) NOT NULL,
    pid        BIGINT       NOT NULL,
    started_at BIGINT       NOT NULL,
    renewed_at BIGINT       NOT NULL,
    expires_at BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

ALTER TABLE engagement_outbox ADD COLUMN claimed_by VARCHAR(64) NULL;
