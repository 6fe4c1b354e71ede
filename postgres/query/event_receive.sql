-- Stores one delivery in one statement: a new key is inserted pending and due
-- now, and announced with NOTIFY; a known key only counts the delivery, and a
-- delivery whose payload hash differs is kept as a conflict. ON CONFLICT makes
-- concurrent deliveries of one key queue on its row instead of failing.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
received AS (
    INSERT INTO ferry_event AS e (source, event_id, type, payload, headers, payload_sha256,
                                  next_attempt_at, first_delivered_at, last_delivered_at, origin,
                                  traceparent, tracestate)
    SELECT @source::text, @event_id::text, @type::text, @payload::bytea, @headers::jsonb,
           @payload_sha256::bytea, now, now, now, @origin::text,
           nullif(@traceparent::text, ''), nullif(@tracestate::text, '')
    FROM clock
    ON CONFLICT (source, event_id) DO UPDATE SET
        deliveries        = e.deliveries + 1,
        last_delivered_at = excluded.last_delivered_at,
        conflicts         = e.conflicts + (e.payload_sha256 <> excluded.payload_sha256)::int
    -- An update always raises deliveries above 1, so 1 means this statement
    -- inserted the row.
    RETURNING e.id, e.deliveries = 1 AS inserted, e.payload_sha256 <> @payload_sha256::bytea AS conflicting
),
conflict AS (
    INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
    SELECT id, (SELECT now FROM clock), @payload_sha256::bytea, @payload::bytea, @headers::jsonb
    FROM received
    WHERE conflicting
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') FROM received WHERE inserted
)
-- Joining notified makes PostgreSQL evaluate it.
SELECT received.id, received.inserted, received.conflicting
FROM received LEFT JOIN notified ON true;
