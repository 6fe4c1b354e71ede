-- Columns and tables for the service around the core: where an event came
-- from, its trace, replayed bodies, what the app answered, who acted on an
-- event, and singleton work shared by several instances.

-- origin: 'delivery' (the provider sent it) or 'catchup' (fetched from the
-- provider's API by a reconciler).
ALTER TABLE ferry_event ADD COLUMN origin text NOT NULL DEFAULT 'delivery'
    CHECK (origin IN ('delivery', 'catchup'));
-- The W3C trace context of the receipt, so an attempt in another process
-- links to it. NULL when tracing was off.
ALTER TABLE ferry_event ADD COLUMN traceparent text;
ALTER TABLE ferry_event ADD COLUMN tracestate text;
-- Deliveries of this event's body under another id, for providers that sign
-- only the body (suspected replays; ferry_replay keeps each one).
ALTER TABLE ferry_event ADD COLUMN replays int NOT NULL DEFAULT 0;
-- Replay detection looks a body up within a source.
CREATE INDEX ferry_event_source_payload ON ferry_event (source, payload_sha256);

-- What the app answered a forwarded attempt: its HTTP status and the first
-- bytes of its response (capped by the forwarder).
ALTER TABLE ferry_attempt ADD COLUMN http_status int;
ALTER TABLE ferry_attempt ADD COLUMN response text;

-- A delivery whose body matched event_id's under another id: answered 2xx,
-- never processed, kept for an operator.
CREATE TABLE ferry_replay (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         bigint      NOT NULL REFERENCES ferry_event (id) ON DELETE CASCADE,
    received_at      timestamptz NOT NULL,
    claimed_event_id text        NOT NULL,
    claimed_type     text        NOT NULL DEFAULT '',
    headers          jsonb
);
CREATE INDEX ferry_replay_event ON ferry_replay (event_id, id);

-- Operator actions on an event (requeue, replay, retry now), with who and
-- when: the audit half of the ledger.
CREATE TABLE ferry_action (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id bigint      NOT NULL REFERENCES ferry_event (id) ON DELETE CASCADE,
    at       timestamptz NOT NULL,
    action   text        NOT NULL,
    actor    text        NOT NULL
);
CREATE INDEX ferry_action_event ON ferry_action (event_id, id);

-- Named leases for work one instance of a cluster does at a time (catch-up,
-- pushed alerts, maintenance), timed on the database's clock.
CREATE TABLE ferry_lease (
    name       text        PRIMARY KEY,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Progress of periodic work: catch-up checkpoints, alerts already sent.
CREATE TABLE ferry_checkpoint (
    name       text        PRIMARY KEY,
    value      text        NOT NULL,
    updated_at timestamptz NOT NULL
);
