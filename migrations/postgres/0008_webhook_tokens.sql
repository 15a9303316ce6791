-- Tokens of signed provider webhooks already accepted (Mailgun): a replayed
-- request carries a seen token and is refused.
CREATE TABLE engagement_webhook_tokens (
    token   TEXT    NOT NULL PRIMARY KEY,
    seen_at BIGINT NOT NULL
);

-- the soft-bounce policy counts an address's recent soft bounces
CREATE INDEX engagement_bounces_address ON engagement_bounces (address_hash, kind, created_at);
