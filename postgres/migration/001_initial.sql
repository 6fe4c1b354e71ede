-- Events, keyed by (source, event_id). Every column a worker or an operator
-- reads is here; the ledger and the conflicts hang off the row id.
CREATE TABLE ferry_event (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source             text        NOT NULL,
    event_id           text        NOT NULL,
    type               text        NOT NULL DEFAULT '',
    payload            bytea       NOT NULL,
    headers            jsonb,
    payload_sha256     bytea       NOT NULL,
    state              text        NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'in_progress', 'done', 'dead', 'unknown')),
    -- attempt is the fencing token; attempt - attempt_base is the budget spent
    -- since the last requeue.
    attempt            int         NOT NULL DEFAULT 0,
    attempt_base       int         NOT NULL DEFAULT 0,
    lease_owner        text,
    lease_expires_at   timestamptz,
    next_attempt_at    timestamptz NOT NULL,
    first_delivered_at timestamptz NOT NULL,
    last_delivered_at  timestamptz NOT NULL,
    deliveries         int         NOT NULL DEFAULT 1,
    conflicts          int         NOT NULL DEFAULT 0,
    claimed_at         timestamptz,
    completed_at       timestamptz,
    last_error         text,
    requeued_at        timestamptz,
    UNIQUE (source, event_id)
);

-- Claim: due pending events, and in_progress events whose lease expired.
CREATE INDEX ferry_event_pending_due ON ferry_event (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX ferry_event_lease_expiry ON ferry_event (lease_expires_at, id) WHERE state = 'in_progress';
-- List: newest first within a source or a state (the primary key serves the rest).
CREATE INDEX ferry_event_source_id ON ferry_event (source, id);
CREATE INDEX ferry_event_state_id ON ferry_event (state, id);
-- Purge: done events of a source by completion time.
CREATE INDEX ferry_event_done_completed ON ferry_event (source, completed_at) WHERE state = 'done';

-- The attempt ledger: one row per claim, so every repeated side effect
-- leaves a trace.
CREATE TABLE ferry_attempt (
    event_id    bigint      NOT NULL REFERENCES ferry_event (id) ON DELETE CASCADE,
    attempt     int         NOT NULL,
    worker      text        NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    outcome     text        NOT NULL
        CHECK (outcome IN ('running', 'done', 'failed', 'dead', 'released', 'lease_expired')),
    error       text,
    PRIMARY KEY (event_id, attempt)
);

-- Deliveries of a known key whose payload differed: the first ferry.NoticeKeep
-- kept per event, every one counted in ferry_event.conflicts.
CREATE TABLE ferry_conflict (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id       bigint      NOT NULL REFERENCES ferry_event (id) ON DELETE CASCADE,
    received_at    timestamptz NOT NULL,
    payload_sha256 bytea       NOT NULL,
    payload        bytea       NOT NULL,
    headers        jsonb
);
CREATE INDEX ferry_conflict_event ON ferry_conflict (event_id, id);

-- The NOTIFY channel of this schema, so that stores in different schemas of
-- one database (tests, tenants) do not wake each other. A hash keeps it
-- within the 63 bytes of an identifier whatever the schema's name.
CREATE FUNCTION ferry_receipt_channel() RETURNS text
    LANGUAGE sql STABLE
    RETURN 'ferry_received_' || md5(current_schema());
