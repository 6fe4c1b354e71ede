-- Times are INTEGER unix microseconds (UTC): they sort and compare in SQL and
-- keep the precision of a Go time.Time truncated to the microsecond.

CREATE TABLE ferry_event (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    source             TEXT    NOT NULL,
    event_id           TEXT    NOT NULL,
    type               TEXT    NOT NULL DEFAULT '',
    payload            BLOB    NOT NULL,
    headers            TEXT    NOT NULL DEFAULT '{}', -- JSON of http.Header
    payload_sha256     BLOB    NOT NULL,
    state              TEXT    NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'in_progress', 'done', 'dead', 'unknown')),
    attempt            INTEGER NOT NULL DEFAULT 0,
    -- attempt at the last requeue: the attempt budget spent is attempt - attempt_base.
    attempt_base       INTEGER NOT NULL DEFAULT 0,
    lease_owner        TEXT,
    lease_expires_at   INTEGER,
    next_attempt_at    INTEGER NOT NULL,
    first_delivered_at INTEGER NOT NULL,
    last_delivered_at  INTEGER NOT NULL,
    deliveries         INTEGER NOT NULL DEFAULT 1,
    conflicts          INTEGER NOT NULL DEFAULT 0,
    claimed_at         INTEGER,
    completed_at       INTEGER,
    last_error         TEXT,
    requeued_at        INTEGER,
    UNIQUE (source, event_id)
);

-- The claim reads due pending events and expired leases, oldest due first.
CREATE INDEX ferry_event_pending_due ON ferry_event (next_attempt_at, id)
    WHERE state = 'pending';
CREATE INDEX ferry_event_lease_expiry ON ferry_event (lease_expires_at, id)
    WHERE state = 'in_progress';
-- The list pages newest first, optionally by source or state.
CREATE INDEX ferry_event_source_id ON ferry_event (source, id);
CREATE INDEX ferry_event_state_id ON ferry_event (state, id);
-- The purge deletes done events of one source by completion time.
CREATE INDEX ferry_event_done_completed ON ferry_event (source, completed_at)
    WHERE state = 'done';

CREATE TABLE ferry_attempt (
    event_id    INTEGER NOT NULL REFERENCES ferry_event (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    worker      TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    outcome     TEXT    NOT NULL
        CHECK (outcome IN ('running', 'done', 'failed', 'dead', 'released', 'lease_expired')),
    error       TEXT,
    PRIMARY KEY (event_id, attempt)
);

CREATE TABLE ferry_conflict (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id       INTEGER NOT NULL REFERENCES ferry_event (id) ON DELETE CASCADE,
    received_at    INTEGER NOT NULL,
    payload_sha256 BLOB    NOT NULL,
    payload        BLOB    NOT NULL,
    headers        TEXT    NOT NULL DEFAULT '{}'
);

CREATE INDEX ferry_conflict_event ON ferry_conflict (event_id, id);
