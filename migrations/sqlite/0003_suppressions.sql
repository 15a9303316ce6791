-- Addresses Herald must not mail, by address hash (never the address).
-- category '*' covers every category; an unsubscribe names one category.
-- Lifting a suppression deletes its row: the send log keeps the history of
-- what was suppressed and why.
CREATE TABLE engagement_suppressions (
    address_hash TEXT    NOT NULL,
    category     TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    detail       TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    PRIMARY KEY (address_hash, category)
);
CREATE INDEX engagement_suppressions_created ON engagement_suppressions (created_at);
