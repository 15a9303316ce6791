-- Rules that deliver to a URL (the webhook channel) name it here.
ALTER TABLE engagement_rules ADD COLUMN webhook_url TEXT;
