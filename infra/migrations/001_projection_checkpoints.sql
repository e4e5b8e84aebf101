-- Where each projection stands in the events stream. A projection's rows and its checkpoint
-- commit in one transaction, so an event is applied once however often it is delivered.
CREATE TABLE IF NOT EXISTS agency_projection_checkpoints (
    name        text PRIMARY KEY,
    stream_seq  bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    status      text NOT NULL DEFAULT 'running',
    error       text
);
