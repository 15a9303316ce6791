-- Tokens of signed provider webhooks already accepted (Mailgun): a replayed
-- request carries a seen token and is refused.
CREATE TABLE engagement_webhook_tokens (
    token   VARCHAR(191) NOT NULL PRIMARY KEY,
    seen_at BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- the soft-bounce policy counts an address's recent soft bounces
CREATE INDEX engagement_bounces_address ON engagement_bounces (address_hash, kind, created_at);
