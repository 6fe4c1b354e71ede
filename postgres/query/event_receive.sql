-- Stores one delivery in one statement. The key table decides: a new key gets
-- the next event id and a pending event due now, announced with NOTIFY; a
-- known key counts the delivery on its event, in ferry_event or in the
-- archive, and a delivery whose payload hash differs from the first is kept
-- as a conflict, both being deliveries (a key catch-up stored first has
-- caught_up). ON CONFLICT makes concurrent deliveries of one key queue on
-- its key row instead of failing. The archive is reached only when the hot
-- table did not hold the event (ferry_event_done_redeliver). touched is
-- false when neither found it (a requeue moved it back meanwhile, or it was
-- purged): the caller counts the delivery again with event_redeliver.sql
-- once this has committed.
--
-- A conflict or a replay is kept as a row only while the event keeps fewer
-- than @notice_keep of its kind (ferry.NoticeKeep), and a conflict only if
-- none kept has its payload; counted_only says it was not. Receipts of one
-- body queue on its advisory lock, so replays keep exactly @notice_keep;
-- conflicts of one key queue on its key row, but count the kept rows in the
-- statement's snapshot: receipts of one key running at the same moment may
-- keep one more each.
--
-- With @replay_window_us > 0, a new key whose payload hash matches a key of
-- the source first delivered within the window is a replay: nothing is
-- inserted, and the oldest such event keeps it in ferry_replay. Its replays
-- counter is raised after the commit by event_redeliver.sql (touched is
-- false): the receipt's transaction, which may hold several bodies' receipts,
-- then never holds an event row that a completion also locks. The caller holds the body's advisory lock
-- (event_receive_lock.sql), so the lookup sees every committed delivery of
-- this body.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
original AS (
    SELECT o.id
    FROM ferry_event_key o, clock
    WHERE @replay_window_us::bigint > 0
      AND o.source = @source::text
      AND o.payload_sha256 = @payload_sha256::bytea
      AND o.received_at >= clock.now - @replay_window_us::bigint * interval '1 microsecond'
      AND NOT EXISTS (
          SELECT FROM ferry_event_key x WHERE x.source = @source::text AND x.event_id = @event_id::text
      )
    ORDER BY o.id
    LIMIT 1
),
k AS (
    INSERT INTO ferry_event_key AS k (source, event_id, id, payload_sha256, received_at, caught_up)
    SELECT @source::text, @event_id::text, nextval(pg_get_serial_sequence('ferry_event', 'id')),
           @payload_sha256::bytea, now, @origin::text = 'catchup'
    FROM clock
    WHERE NOT EXISTS (SELECT FROM original)
    ON CONFLICT (source, event_id) DO UPDATE SET id = k.id
    -- xmax is 0 on a row this statement inserted. Bytes are compared only
    -- between deliveries: catch-up's copy is never a delivery's bytes.
    RETURNING k.id, k.xmax = 0 AS inserted,
              NOT k.caught_up AND @origin::text = 'delivery'
              AND k.payload_sha256 <> @payload_sha256::bytea AS conflicting
),
received AS (
    INSERT INTO ferry_event (id, source, event_id, type, payload, headers, payload_sha256,
                             next_attempt_at, first_delivered_at, last_delivered_at, origin,
                             traceparent, tracestate)
    SELECT k.id, @source::text, @event_id::text, @type::text, @payload::bytea, @headers::jsonb,
           @payload_sha256::bytea, now, now, now, @origin::text,
           nullif(@traceparent::text, ''), nullif(@tracestate::text, '')
    FROM k, clock
    WHERE k.inserted
    RETURNING id
),
hot AS (
    UPDATE ferry_event e
    SET deliveries = e.deliveries + 1, last_delivered_at = (SELECT now FROM clock),
        conflicts = e.conflicts + k.conflicting::int
    FROM k
    WHERE NOT k.inserted AND e.id = k.id
    RETURNING e.id
),
-- A known key whose event the hot table did not hold: done, or moved.
archived AS (
    SELECT ferry_event_done_redeliver(ARRAY[k.id], ARRAY[1], ARRAY[k.conflicting::int], ARRAY[0],
                                      (SELECT now FROM clock)) AS id
    FROM k
    WHERE NOT k.inserted AND NOT EXISTS (SELECT FROM hot)
),
conflict AS (
    INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
    SELECT id, (SELECT now FROM clock), @payload_sha256::bytea, @payload::bytea, @headers::jsonb
    FROM k
    WHERE conflicting
      AND NOT EXISTS (
          SELECT 1
          FROM (SELECT c.payload_sha256 FROM ferry_conflict c WHERE c.event_id = k.id ORDER BY c.id LIMIT @notice_keep::int) kept
          WHERE kept.payload_sha256 = @payload_sha256::bytea
      )
      AND (SELECT count(*) FROM (SELECT 1 FROM ferry_conflict c WHERE c.event_id = k.id LIMIT @notice_keep::int) kept) < @notice_keep::int
    RETURNING id
),
replay AS (
    INSERT INTO ferry_replay (event_id, received_at, claimed_event_id, claimed_type, headers)
    SELECT id, (SELECT now FROM clock), @event_id::text, @type::text, @headers::jsonb
    FROM original
    WHERE (SELECT count(*) FROM (SELECT 1 FROM ferry_replay r WHERE r.event_id = original.id LIMIT @notice_keep::int) kept) < @notice_keep::int
    RETURNING id
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') FROM received
)
-- One row: the stored event, or the replayed one. Joining notified makes
-- PostgreSQL evaluate it.
SELECT k.id, k.inserted, k.conflicting, false AS replay,
       k.inserted OR EXISTS (SELECT FROM hot) OR EXISTS (SELECT FROM archived) AS touched,
       k.conflicting AND NOT EXISTS (SELECT FROM conflict) AS counted_only
FROM k LEFT JOIN notified ON true
UNION ALL
SELECT id, false, false, true, false, NOT EXISTS (SELECT FROM replay) FROM original;
