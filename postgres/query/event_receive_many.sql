-- Stores a batch of deliveries in one statement, so that a group commit costs
-- PostgreSQL one parse, one plan and one executor run instead of one per
-- delivery. The arrays hold one element per delivery, sorted by key (one lock
-- order for every batch, so two batches sharing keys never deadlock), in
-- arrival order within a key. @is_first marks each key's first delivery: only
-- it is inserted (ON CONFLICT DO UPDATE may touch a row once per statement),
-- carrying @n, the key's delivery count in the batch, and @first_conflicts,
-- how many of the key's later deliveries differ from it.
--
-- The outcome is that of running the deliveries one after the other: a new
-- key is inserted pending and due now, with every delivery counted and every
-- later delivery whose payload hash differs from the first kept as a
-- conflict; a known key counts the deliveries, and each whose hash differs
-- from the stored one is a conflict. One NOTIFY when any key is new.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
delivery AS (
    SELECT d.*
    FROM unnest(@source::text[], @event_id::text[], @type::text[], @payload::bytea[],
                @headers::jsonb[], @payload_sha256::bytea[], @is_first::bool[], @n::int[],
                @first_conflicts::int[], @origin::text[], @traceparent::text[], @tracestate::text[])
         WITH ORDINALITY AS d (source, event_id, type, payload, headers, payload_sha256,
                               is_first, n, first_conflicts, origin, traceparent, tracestate, ord)
),
received AS (
    INSERT INTO ferry_event AS e (source, event_id, type, payload, headers, payload_sha256,
                                  deliveries, conflicts,
                                  next_attempt_at, first_delivered_at, last_delivered_at, origin,
                                  traceparent, tracestate)
    SELECT d.source, d.event_id, d.type, d.payload, d.headers, d.payload_sha256,
           d.n, d.first_conflicts, clock.now, clock.now, clock.now, d.origin,
           nullif(d.traceparent, ''), nullif(d.tracestate, '')
    FROM delivery d, clock
    WHERE d.is_first
    ORDER BY d.ord
    ON CONFLICT (source, event_id) DO UPDATE SET
        deliveries        = e.deliveries + excluded.deliveries,
        last_delivered_at = excluded.last_delivered_at,
        conflicts         = e.conflicts + (
            SELECT count(*)::int FROM delivery d
            WHERE d.source = e.source AND d.event_id = e.event_id
              AND d.payload_sha256 <> e.payload_sha256
        )
    -- payload_sha256 is never updated: it is the stored hash, the first
    -- delivery's for a new row.
    RETURNING e.id, e.source, e.event_id, e.deliveries, e.payload_sha256
),
conflict AS (
    INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
    SELECT r.id, (SELECT now FROM clock), d.payload_sha256, d.payload, d.headers
    FROM received r
    JOIN delivery d ON d.source = r.source AND d.event_id = r.event_id
    WHERE d.payload_sha256 <> r.payload_sha256
    ORDER BY d.ord
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '')
    WHERE EXISTS (
        SELECT FROM received r
        JOIN delivery d ON d.is_first AND d.source = r.source AND d.event_id = r.event_id
        WHERE r.deliveries = d.n
    )
)
-- One row per key, in input order. An update raises deliveries above n (the
-- row had at least one before), so deliveries = n means this statement
-- inserted the row. Joining notified makes PostgreSQL evaluate it.
SELECT r.id, r.deliveries = d.n AS inserted, r.payload_sha256
FROM received r
JOIN delivery d ON d.is_first AND d.source = r.source AND d.event_id = r.event_id
LEFT JOIN notified ON true
ORDER BY d.ord;
