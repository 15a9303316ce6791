-- The operator screen (/ui): accounts, server-side sessions, login attempts
-- (the rate limit and the record of refusals), the audit log of operator
-- actions, and the reasons suppressions were lifted (lifting deletes the
-- suppression row; this keeps who lifted it and why).
CREATE TABLE engagement_operators (
    id            VARCHAR(36)  NOT NULL PRIMARY KEY,
    email         VARCHAR(254) NOT NULL,
    password_hash VARCHAR(255) NOT NULL,
    created_at    BIGINT       NOT NULL,
    UNIQUE KEY engagement_operators_email (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Only a hash of the session token is kept: a leaked table opens no session.
CREATE TABLE engagement_operator_sessions (
    token_hash     VARCHAR(64)  NOT NULL PRIMARY KEY,
    operator_id    VARCHAR(36)  NOT NULL,
    operator_email VARCHAR(254) NOT NULL,
    created_at     BIGINT       NOT NULL,
    expires_at     BIGINT       NOT NULL,
    KEY engagement_operator_sessions_operator (operator_id),
    KEY engagement_operator_sessions_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_login_attempts (
    id         VARCHAR(36)  NOT NULL PRIMARY KEY,
    email      VARCHAR(254) NOT NULL,
    ip         VARCHAR(64)  NOT NULL,
    outcome    VARCHAR(32)  NOT NULL,
    created_at BIGINT       NOT NULL,
    KEY engagement_login_attempts_email (email, created_at),
    KEY engagement_login_attempts_ip (ip, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_audit_log (
    id             VARCHAR(36)  NOT NULL PRIMARY KEY,
    operator_email VARCHAR(254) NOT NULL,
    action         VARCHAR(64)  NOT NULL,
    target         VARCHAR(255) NOT NULL,
    detail         TEXT,
    created_at     BIGINT       NOT NULL,
    KEY engagement_audit_log_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_suppression_lifts (
    id           VARCHAR(36)  NOT NULL PRIMARY KEY,
    address_hash VARCHAR(64)  NOT NULL,
    category     VARCHAR(64)  NOT NULL,
    lifted       BIGINT       NOT NULL,
    reason       TEXT,
    lifted_by    VARCHAR(254) NOT NULL,
    created_at   BIGINT       NOT NULL,
    KEY engagement_suppression_lifts_address (address_hash, created_at),
    KEY engagement_suppression_lifts_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The outbox page's recent throughput counts the send log's last hour.
CREATE INDEX engagement_sends_created ON engagement_sends (created_at);
