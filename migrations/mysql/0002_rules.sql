-- Triggers, rules, recipients and API keys.
-- engagement_triggers is also the transactional-outbox contract: a host
-- application may INSERT (id, type, user_id[, payload][, occurred_at]
-- [, idempotency_key]) inside its own transaction; the planner picks up rows
-- whose planned_at is NULL. Times default to now, in epoch milliseconds.
CREATE TABLE engagement_triggers (
    id              VARCHAR(64)  NOT NULL PRIMARY KEY,
    type            VARCHAR(128) NOT NULL,
    user_id         VARCHAR(255) NOT NULL,
    payload         MEDIUMTEXT   NOT NULL DEFAULT ('{}'),
    idempotency_key VARCHAR(255),
    request_hash    VARCHAR(64),
    occurred_at     BIGINT       NOT NULL DEFAULT (FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)),
    created_at      BIGINT       NOT NULL DEFAULT (FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)),
    planned_at      BIGINT,
    planned_count   BIGINT,
    plan_detail     TEXT,
    UNIQUE KEY engagement_triggers_idempotency (idempotency_key),
    -- the planner's sweep (planned_at IS NULL ORDER BY created_at)
    KEY engagement_triggers_unplanned (planned_at, created_at),
    KEY engagement_triggers_user (user_id, created_at),
    -- rule previews read recent triggers of one type
    KEY engagement_triggers_type (type, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_rules (
    id             VARCHAR(36)  NOT NULL PRIMARY KEY,
    name           VARCHAR(255) NOT NULL,
    trigger_type   VARCHAR(128) NOT NULL,
    condition_expr TEXT,
    channel        VARCHAR(64)  NOT NULL,
    template       MEDIUMTEXT   NOT NULL,
    delay_seconds  BIGINT       NOT NULL DEFAULT 0,
    grace_seconds  BIGINT,
    category       VARCHAR(64)  NOT NULL,
    enabled        BIGINT       NOT NULL DEFAULT 0,
    created_at     BIGINT       NOT NULL,
    updated_at     BIGINT       NOT NULL,
    KEY engagement_rules_type (trigger_type, enabled)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_recipients (
    user_id     VARCHAR(255) NOT NULL PRIMARY KEY,
    email       VARCHAR(320),
    name        VARCHAR(255),
    locale      VARCHAR(35),
    timezone    VARCHAR(64),
    preferences TEXT         NOT NULL,
    created_at  BIGINT       NOT NULL,
    updated_at  BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE engagement_api_keys (
    id           VARCHAR(36)  NOT NULL PRIMARY KEY,
    name         VARCHAR(255) NOT NULL,
    key_hash     VARCHAR(64)  NOT NULL,
    prefix       VARCHAR(16)  NOT NULL,
    created_at   BIGINT       NOT NULL,
    revoked_at   BIGINT,
    UNIQUE KEY engagement_api_keys_hash (key_hash)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE INDEX engagement_outbox_trigger ON engagement_outbox (trigger_id);
CREATE INDEX engagement_outbox_rule ON engagement_outbox (rule_id, status);
