-- The operator screen (/ui): accounts, server-side sessions, login attempts
-- (the rate limit and the record of refusals), the audit log of operator
-- actions, and the reasons suppressions were lifted (lifting deletes the
-- suppression row; this keeps who lifted it and why).
CREATE TABLE engagement_operators (
    id            TEXT    NOT NULL PRIMARY KEY,
    email         TEXT    NOT NULL UNIQUE,
    password_hash TEXT    NOT NULL,
    created_at    INTEGER NOT NULL
);

-- Only a hash of the session token is kept: a leaked table opens no session.
CREATE TABLE engagement_operator_sessions (
    token_hash     TEXT    NOT NULL PRIMARY KEY,
    operator_id    TEXT    NOT NULL,
    operator_email TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL
);
CREATE INDEX engagement_operator_sessions_operator ON engagement_operator_sessions (operator_id);
CREATE INDEX engagement_operator_sessions_expires ON engagement_operator_sessions (expires_at);

CREATE TABLE engagement_login_attempts (
    id         TEXT    NOT NULL PRIMARY KEY,
    email      TEXT    NOT NULL,
    ip         TEXT    NOT NULL,
    outcome    TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX engagement_login_attempts_email ON engagement_login_attempts (email, created_at);
CREATE INDEX engagement_login_attempts_ip ON engagement_login_attempts (ip, created_at);

CREATE TABLE engagement_audit_log (
    id             TEXT    NOT NULL PRIMARY KEY,
    operator_email TEXT    NOT NULL,
    action         TEXT    NOT NULL,
    target         TEXT    NOT NULL,
    detail         TEXT,
    created_at     INTEGER NOT NULL
);
CREATE INDEX engagement_audit_log_created ON engagement_audit_log (created_at);

CREATE TABLE engagement_suppression_lifts (
    id           TEXT    NOT NULL PRIMARY KEY,
    address_hash TEXT    NOT NULL,
    category     TEXT    NOT NULL,
    lifted       INTEGER NOT NULL,
    reason       TEXT,
    lifted_by    TEXT    NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE INDEX engagement_suppression_lifts_address ON engagement_suppression_lifts (address_hash, created_at);
CREATE INDEX engagement_suppression_lifts_created ON engagement_suppression_lifts (created_at);

-- The outbox page's recent throughput counts the send log's last hour.
CREATE INDEX engagement_sends_created ON engagement_sends (created_at);
