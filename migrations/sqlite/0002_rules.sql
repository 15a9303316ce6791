-- Triggers, rules, recipients and API keys.
-- engagement_triggers is also the transactional-outbox contract: a host
-- application may INSERT (id, type, user_id[, payload][, occurred_at]
-- [, idempotency_key]) inside its own transaction; the planner picks up rows
-- whose planned_at is NULL. Times default to now, in epoch milliseconds.
CREATE TABLE engagement_triggers (
    id              TEXT    NOT NULL PRIMARY KEY,
    type            TEXT    NOT NULL,
    user_id         TEXT    NOT NULL,
    payload         TEXT    NOT NULL DEFAULT '{}',
    idempotency_key TEXT    UNIQUE,
    request_hash    TEXT,
    occurred_at     INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    created_at      INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    planned_at      INTEGER,
    planned_count   INTEGER,
    plan_detail     TEXT
);
-- the planner's sweep (planned_at IS NULL ORDER BY created_at)
CREATE INDEX engagement_triggers_unplanned ON engagement_triggers (planned_at, created_at);
CREATE INDEX engagement_triggers_user ON engagement_triggers (user_id, created_at);
-- rule previews read recent triggers of one type
CREATE INDEX engagement_triggers_type ON engagement_triggers (type, created_at);

CREATE TABLE engagement_rules (
    id             TEXT    NOT NULL PRIMARY KEY,
    name           TEXT    NOT NULL,
    trigger_type   TEXT    NOT NULL,
    condition_expr TEXT,
    channel        TEXT    NOT NULL,
    template       TEXT    NOT NULL,
    delay_seconds  INTEGER NOT NULL DEFAULT 0,
    grace_seconds  INTEGER,
    category       TEXT    NOT NULL,
    enabled        INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX engagement_rules_type ON engagement_rules (trigger_type, enabled);

CREATE TABLE engagement_recipients (
    user_id     TEXT    NOT NULL PRIMARY KEY,
    email       TEXT,
    name        TEXT,
    locale      TEXT,
    timezone    TEXT,
    preferences TEXT    NOT NULL DEFAULT '{}',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE engagement_api_keys (
    id           TEXT    NOT NULL PRIMARY KEY,
    name         TEXT    NOT NULL,
    key_hash     TEXT    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);

CREATE INDEX engagement_outbox_trigger ON engagement_outbox (trigger_id);
CREATE INDEX engagement_outbox_rule ON engagement_outbox (rule_id, status);
