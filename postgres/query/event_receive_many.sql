-- Stores a batch of deliveries in one statement, so that a group commit costs
-- PostgreSQL one parse, one plan and one executor run instead of one per
-- delivery. The arrays hold one element per delivery, sorted by key (one lock
-- order for every batch, so two batches sharing keys never deadlock), in
-- arrival order within a key. @is_first marks each key's first delivery: only
-- it goes into the key table (ON CONFLICT DO UPDATE may touch a row once per
-- statement), carrying @n, the key's delivery count in the batch, and
-- @first_conflicts, how many of the key's later deliveries differ from it.
-- Bytes are compared only between deliveries (origin 'delivery'): a key
-- first stored by catch-up (caught_up) holds the API's copy, never a
-- delivery's bytes, and a catch-up receipt is compared with nothing.
--
-- The outcome is that of running the deliveries one after the other: a new
-- key gets the next event id and a pending event due now, with every
-- delivery counted and every later delivery whose payload hash differs from
-- the first kept as a conflict; a known key counts the deliveries on its
-- event (in ferry_event or the archive), and each whose hash differs from
-- the stored one is a conflict. One NOTIFY when any key is new. The archive
-- is reached only for keys whose event the hot table did not hold
-- (ferry_event_done_redeliver). touched is false for a known key whose event
-- neither found (a requeue moved it back meanwhile, or it was purged): the
-- caller counts those with event_redeliver.sql.
--
-- Conflicts are kept as in event_receive.sql, in arrival order: per key, the
-- first delivery of each payload that no kept conflict has, while the event
-- keeps fewer than @notice_keep. kept lists, per key, the positions (ord) of
-- the deliveries kept; every other conflict was only counted.
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
k AS (
    INSERT INTO ferry_event_key AS k (source, event_id, id, payload_sha256, received_at, caught_up)
    SELECT d.source, d.event_id, nextval(pg_get_serial_sequence('ferry_event', 'id')),
           d.payload_sha256, clock.now, d.origin = 'catchup'
    FROM delivery d, clock
    WHERE d.is_first
    ORDER BY d.ord
    ON CONFLICT (source, event_id) DO UPDATE SET id = k.id
    -- xmax is 0 on a row this statement inserted.
    RETURNING k.id, k.source, k.event_id, k.payload_sha256, k.caught_up, k.xmax = 0 AS inserted
),
-- Per key: the first delivery, and how many of the batch's deliveries
-- differ from the stored hash.
kd AS (
    SELECT k.*, d.type, d.payload, d.headers, d.n, d.first_conflicts, d.origin,
           d.traceparent, d.tracestate, d.ord,
           (SELECT count(*)::int FROM delivery x
            WHERE x.source = k.source AND x.event_id = k.event_id
              AND NOT k.caught_up AND x.origin = 'delivery'
              AND x.payload_sha256 <> k.payload_sha256) AS differing
    FROM k
    JOIN delivery d ON d.is_first AND d.source = k.source AND d.event_id = k.event_id
),
received AS (
    INSERT INTO ferry_event (id, source, event_id, type, payload, headers, payload_sha256,
                             deliveries, conflicts,
                             next_attempt_at, first_delivered_at, last_delivered_at, origin,
                             traceparent, tracestate)
    SELECT kd.id, kd.source, kd.event_id, kd.type, kd.payload, kd.headers, kd.payload_sha256,
           kd.n, kd.first_conflicts, clock.now, clock.now, clock.now, kd.origin,
           nullif(kd.traceparent, ''), nullif(kd.tracestate, '')
    FROM kd, clock
    WHERE kd.inserted
    ORDER BY kd.ord
    RETURNING id
),
-- Known keys' live rows are locked in id order first, as completions lock
-- them (keys are in key order, which is not id order), so the two never
-- wait on each other in a cycle.
locked AS (
    SELECT e.id FROM ferry_event e
    WHERE e.id IN (SELECT id FROM kd WHERE NOT kd.inserted)
    ORDER BY e.id
    FOR UPDATE
),
hot AS (
    UPDATE ferry_event e
    SET deliveries = e.deliveries + kd.n, last_delivered_at = (SELECT now FROM clock),
        conflicts = e.conflicts + kd.differing
    FROM kd, locked
    WHERE NOT kd.inserted AND e.id = kd.id AND locked.id = kd.id
    RETURNING e.id
),
-- Known keys whose event the hot table did not hold: done, or moved.
archived AS (
    SELECT ferry_event_done_redeliver(array_agg(kd.id), array_agg(kd.n), array_agg(kd.differing),
                                      array_agg(0), (SELECT now FROM clock)) AS id
    FROM kd
    WHERE NOT kd.inserted AND kd.id NOT IN (SELECT id FROM hot)
    HAVING count(*) > 0
),
-- The batch's conflicts whose payload the event does not keep yet;
-- nth_of_payload is 1 for the first delivery of each payload.
conflicting AS (
    SELECT k.id, d.ord, d.payload_sha256, d.payload, d.headers,
           row_number() OVER (PARTITION BY k.id, d.payload_sha256 ORDER BY d.ord) AS nth_of_payload
    FROM k
    JOIN delivery d ON d.source = k.source AND d.event_id = k.event_id
    WHERE NOT k.caught_up AND d.origin = 'delivery' AND d.payload_sha256 <> k.payload_sha256
      AND NOT EXISTS (
          SELECT 1
          FROM (SELECT c.payload_sha256 FROM ferry_conflict c WHERE c.event_id = k.id ORDER BY c.id LIMIT @notice_keep::int) kept
          WHERE kept.payload_sha256 = d.payload_sha256
      )
),
-- Of those, the first payloads while the event keeps fewer than @notice_keep.
keep AS (
    SELECT x.*
    FROM (SELECT c.*, row_number() OVER (PARTITION BY c.id ORDER BY c.ord) AS nth
          FROM conflicting c WHERE c.nth_of_payload = 1) x
    WHERE x.nth + (SELECT count(*) FROM (SELECT 1 FROM ferry_conflict c WHERE c.event_id = x.id LIMIT @notice_keep::int) kept) <= @notice_keep::int
),
conflict AS (
    INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
    SELECT keep.id, (SELECT now FROM clock), keep.payload_sha256, keep.payload, keep.headers
    FROM keep
    ORDER BY keep.ord
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') WHERE EXISTS (SELECT FROM received)
)
-- One row per key, in input order. Joining notified makes PostgreSQL
-- evaluate it.
SELECT kd.id, kd.inserted, kd.payload_sha256, kd.caught_up, kd.n, kd.differing,
       kd.inserted OR kd.id IN (SELECT id FROM hot UNION ALL SELECT id FROM archived) AS touched,
       ARRAY(SELECT keep.ord FROM keep WHERE keep.id = kd.id) AS kept
FROM kd
LEFT JOIN notified ON true
ORDER BY kd.ord;
