-- Columns crawler_ops adds to a user's existing status table; the old columns keep working.
ALTER TABLE {table}
    ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_error text,
    ADD COLUMN IF NOT EXISTS claim_token text,
    ADD COLUMN IF NOT EXISTS seq bigint
