-- Deliveries of webhook subscriptions (services/webhooks/): one row per (subscription,
-- event), written by the webhooks service as it reads the log, not by a projection. The
-- row is the delivery's schedule: a restarted service goes on from `next_attempt_at`.
-- `status`: pending (an attempt is due at `next_attempt_at`), delivered, failed (the
-- receiver did not take it within a day of attempts).
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    delivery_id     text        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    agency_id       text        NOT NULL,
    subscription_id text        NOT NULL,
    event_id        text        NOT NULL,
    kind            text        NOT NULL,
    url             text        NOT NULL,
    body            bytea       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    last_status     integer,
    created_at      timestamptz NOT NULL,
    delivered_at    timestamptz
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due
    ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_subscription
    ON webhook_deliveries (tenant_id, subscription_id, created_at);
ALTER TABLE webhook_deliveries ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_rows ON webhook_deliveries;
CREATE POLICY tenant_rows ON webhook_deliveries FOR SELECT TO agency_reader
    USING (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT ON webhook_deliveries TO agency_reader;
