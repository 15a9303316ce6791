-- Addresses Herald must not mail, by address hash (never the address).
-- category '*' covers every category; an unsubscribe names one category.
-- Lifting a suppression deletes its row: the send log keeps the history of
-- what was suppressed and why.
CREATE TABLE engagement_suppressions (
    address_hash VARCHAR(64)  NOT NULL,
    category     VARCHAR(64)  NOT NULL,
    reason       VARCHAR(32)  NOT NULL,
    detail       TEXT,
    created_at   BIGINT       NOT NULL,
    expires_at   BIGINT,
    PRIMARY KEY (address_hash, category),
    KEY engagement_suppressions_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
