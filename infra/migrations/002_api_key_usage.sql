-- When each API key was last used. Written by the API (at most every few seconds per key),
-- not by a projection: it is not a fact of the log, and a rebuild must not forget it.
CREATE TABLE IF NOT EXISTS agency_api_key_usage (
    key_id       text PRIMARY KEY,
    tenant_id    text NOT NULL,
    last_used_at timestamptz NOT NULL
);
