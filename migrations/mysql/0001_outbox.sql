-- The outbox, its append-only send log and the in-app inbox.
-- Times are BIGINT milliseconds since the Unix epoch (UTC) in every dialect:
-- see src/store/mod.rs for why. utf8mb4_bin keeps ids and user ids
-- case-sensitive, as they are on SQLite and PostgreSQL.
CREATE TABLE engagement_outbox (
    id          VARCHAR(36)  NOT NULL PRIMARY KEY,
    dedupe_key  VARCHAR(255) NOT NULL,
    rule_id     VARCHAR(64),
    trigger_id  VARCHAR(64),
    user_id     VARCHAR(255) NOT NULL,
    channel     VARCHAR(64)  NOT NULL,
    payload     MEDIUMTEXT   NOT NULL,
    status      VARCHAR(16)  NOT NULL DEFAULT 'scheduled'
                CHECK (status IN ('scheduled','sending','sent','failed','suppressed','expired','cancelled')),
    due_at      BIGINT       NOT NULL,
    expires_at  BIGINT,
    attempts    BIGINT       NOT NULL DEFAULT 0,
    last_error  TEXT,
    claim_token VARCHAR(36),
    claimed_at  BIGINT,
    created_at  BIGINT       NOT NULL,
    updated_at  BIGINT       NOT NULL,
    UNIQUE KEY engagement_outbox_dedupe (dedupe_key),
    -- claim (status='scheduled' AND due_at <= now ORDER BY due_at) and the next-due probe
    KEY engagement_outbox_due (status, due_at),
    -- stale reclaim (status='sending' AND claimed_at < cutoff)
    KEY engagement_outbox_claimed (status, claimed_at),
    -- MySQL has no UPDATE ... RETURNING: the claimed batch is read back by its token
    KEY engagement_outbox_claim_token (claim_token),
    -- "what is still pending for user X"
    KEY engagement_outbox_user (user_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_sends (
    id           VARCHAR(36)  NOT NULL PRIMARY KEY,
    outbox_id    VARCHAR(36)  NOT NULL,
    rule_id      VARCHAR(64),
    trigger_id   VARCHAR(64),
    user_id      VARCHAR(255) NOT NULL,
    channel      VARCHAR(64)  NOT NULL,
    transport    VARCHAR(64),
    address_hash VARCHAR(64),
    status       VARCHAR(16)  NOT NULL
                 CHECK (status IN ('sent','failed','suppressed','bounced','expired','cancelled','complained')),
    detail       TEXT,
    attempts     BIGINT       NOT NULL DEFAULT 0,
    created_at   BIGINT       NOT NULL,
    KEY engagement_sends_user (user_id, created_at),
    KEY engagement_sends_outbox (outbox_id),
    KEY engagement_sends_address (address_hash, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_inbox (
    id          VARCHAR(36)  NOT NULL PRIMARY KEY,
    outbox_id   VARCHAR(36)  NOT NULL,
    user_id     VARCHAR(255) NOT NULL,
    title       TEXT         NOT NULL,
    body        MEDIUMTEXT,
    url         TEXT,
    data        MEDIUMTEXT,
    created_at  BIGINT       NOT NULL,
    seen_at     BIGINT,
    read_at     BIGINT,
    archived_at BIGINT,
    UNIQUE KEY engagement_inbox_outbox (outbox_id),
    KEY engagement_inbox_user (user_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
