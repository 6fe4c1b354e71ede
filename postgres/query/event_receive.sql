-- Stores one delivery in one statement: a new key is inserted pending and due
-- now, and announced with NOTIFY; a known key only counts the delivery, and a
-- delivery whose payload hash differs is kept as a conflict. ON CONFLICT makes
-- concurrent deliveries of one key queue on its row instead of failing.
--
-- With @replay_window_us > 0, a new key whose payload hash matches an event of
-- the source first delivered within the window is a replay: nothing is
-- inserted, the oldest such event counts it and keeps it in ferry_replay. The
-- caller holds the body's advisory lock (event_receive_lock.sql), so the
-- lookup sees every committed delivery of this body.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
original AS (
    SELECT e.id
    FROM ferry_event e, clock
    WHERE @replay_window_us::bigint > 0
      AND e.source = @source::text
      AND e.payload_sha256 = @payload_sha256::bytea
      AND e.first_delivered_at >= clock.now - @replay_window_us::bigint * interval '1 microsecond'
      AND NOT EXISTS (
          SELECT FROM ferry_event k WHERE k.source = @source::text AND k.event_id = @event_id::text
      )
    ORDER BY e.id
    LIMIT 1
),
received AS (
    INSERT INTO ferry_event AS e (source, event_id, type, payload, headers, payload_sha256,
                                  next_attempt_at, first_delivered_at, last_delivered_at, origin,
                                  traceparent, tracestate)
    SELECT @source::text, @event_id::text, @type::text, @payload::bytea, @headers::jsonb,
           @payload_sha256::bytea, now, now, now, @origin::text,
           nullif(@traceparent::text, ''), nullif(@tracestate::text, '')
    FROM clock
    WHERE NOT EXISTS (SELECT FROM original)
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
replayed AS (
    UPDATE ferry_event SET replays = replays + 1
    WHERE id = (SELECT id FROM original)
    RETURNING id
),
replay AS (
    INSERT INTO ferry_replay (event_id, received_at, claimed_event_id, claimed_type, headers)
    SELECT id, (SELECT now FROM clock), @event_id::text, @type::text, @headers::jsonb
    FROM replayed
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') FROM received WHERE inserted
)
-- One row: the stored event, or the replayed one. Joining notified makes
-- PostgreSQL evaluate it.
SELECT received.id, received.inserted, received.conflicting, false AS replay
FROM received LEFT JOIN notified ON true
UNION ALL
SELECT id, false, false, true FROM replayed;
