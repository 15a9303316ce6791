-- Bounces and complaints as evidence: what arrived, what it was matched to,
-- and a bounded copy of the raw input. The fingerprint (SHA-256 of the raw
-- message and the recipient) makes ingestion idempotent.
CREATE TABLE engagement_bounces (
    id           TEXT    NOT NULL PRIMARY KEY,
    fingerprint  TEXT    NOT NULL UNIQUE,
    provider     TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    address_hash TEXT,
    status       TEXT,
    reply_code   INTEGER,
    detail       TEXT,
    outbox_id    TEXT,
    matched_by   TEXT,
    raw_excerpt  TEXT,
    created_at   INTEGER NOT NULL
);
CREATE INDEX engagement_bounces_created ON engagement_bounces (created_at);
