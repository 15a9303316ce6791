-- The outbox, its append-only send log and the in-app inbox.
-- Times are BIGINT milliseconds since the Unix epoch (UTC) in every dialect:
-- see src/store/mod.rs for why.
CREATE TABLE engagement_outbox (
    id          TEXT    NOT NULL PRIMARY KEY,
    dedupe_key  TEXT    NOT NULL UNIQUE,
    rule_id     TEXT,
    trigger_id  TEXT,
    user_id     TEXT    NOT NULL,
    channel     TEXT    NOT NULL,
    payload     TEXT    NOT NULL DEFAULT '{}',
    status      TEXT    NOT NULL DEFAULT 'scheduled'
                CHECK (status IN ('scheduled','sending','sent','failed','suppressed','expired','cancelled')),
    due_at      BIGINT NOT NULL,
    expires_at  BIGINT,
    attempts    BIGINT NOT NULL DEFAULT 0,
    last_error  TEXT,
    claim_token TEXT,
    claimed_at  BIGINT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
-- claim (status='scheduled' AND due_at <= now ORDER BY due_at) and the next-due probe
CREATE INDEX engagement_outbox_due ON engagement_outbox (status, due_at);
-- stale reclaim (status='sending' AND claimed_at < cutoff)
CREATE INDEX engagement_outbox_claimed ON engagement_outbox (status, claimed_at);
-- "what is still pending for user X"
CREATE INDEX engagement_outbox_user ON engagement_outbox (user_id, created_at);

CREATE TABLE engagement_sends (
    id           TEXT    NOT NULL PRIMARY KEY,
    outbox_id    TEXT    NOT NULL,
    rule_id      TEXT,
    trigger_id   TEXT,
    user_id      TEXT    NOT NULL,
    channel      TEXT    NOT NULL,
    transport    TEXT,
    address_hash TEXT,
    status       TEXT    NOT NULL
                 CHECK (status IN ('sent','failed','suppressed','bounced','expired','cancelled','complained')),
    detail       TEXT,
    attempts     BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL
);
CREATE INDEX engagement_sends_user ON engagement_sends (user_id, created_at);
CREATE INDEX engagement_sends_outbox ON engagement_sends (outbox_id);
CREATE INDEX engagement_sends_address ON engagement_sends (address_hash, created_at);

CREATE TABLE engagement_inbox (
    id          TEXT    NOT NULL PRIMARY KEY,
    outbox_id   TEXT    NOT NULL UNIQUE,
    user_id     TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    body        TEXT,
    url         TEXT,
    data        TEXT,
    created_at  BIGINT NOT NULL,
    seen_at     BIGINT,
    read_at     BIGINT,
    archived_at BIGINT
);
CREATE INDEX engagement_inbox_user ON engagement_inbox (user_id, created_at);
