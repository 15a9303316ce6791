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
    occurred_at     BIGINT NOT NULL DEFAULT (floor(extract(epoch from now()) * 1000)::bigint),
    created_at      BIGINT NOT NULL DEFAULT (floor(extract(epoch from now()) * 1000)::bigint),
    planned_at      BIGINT,
    planned_count   BIGINT,
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
    delay_seconds  BIGINT NOT NULL DEFAULT 0,
    grace_seconds  BIGINT,
    category       TEXT    NOT NULL,
    enabled        BIGINT NOT NULL DEFAULT 0,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX engagement_rules_type ON engagement_rules (trigger_type, enabled);

CREATE TABLE engagement_recipients (
    user_id     TEXT    NOT NULL PRIMARY KEY,
    email       TEXT,
    name        TEXT,
    locale      TEXT,
    timezone    TEXT,
    preferences TEXT    NOT NULL DEFAULT '{}',
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE TABLE engagement_api_keys (
    id           TEXT    NOT NULL PRIMARY KEY,
    name         TEXT    NOT NULL,
    key_hash     TEXT    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);

CREATE INDEX engagement_outbox_trigger ON engagement_outbox (trigger_id);
CREATE INDEX engagement_outbox_rule ON engagement_outbox (rule_id, status);
