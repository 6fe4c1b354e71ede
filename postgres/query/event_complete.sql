-- Marks a leased event done, only while the lease is held: the event moves
-- from ferry_event to the archive (ferry_event_done) with its id, its ledger
-- moves to the archive's (ferry_attempt_done) with the completing attempt
-- closed, and its day's done counter goes up. No row back means the
-- lease was lost and nothing changed.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
completed AS (
    DELETE FROM ferry_event
    WHERE id = @id::bigint
      AND attempt = @attempt::int
      AND state = 'in_progress'
      AND lease_expires_at > (SELECT now FROM clock)
    RETURNING *
),
archived AS (
    INSERT INTO ferry_event_done (id, source, event_id, type, payload, headers, payload_sha256, state,
                                  attempt, attempt_base, lease_owner, lease_expires_at, next_attempt_at,
                                  first_delivered_at, last_delivered_at, deliveries, conflicts, claimed_at,
                                  completed_at, last_error, requeued_at, origin, traceparent, tracestate, replays)
    SELECT id, source, event_id, type, payload, headers, payload_sha256, 'done',
           attempt, attempt_base, NULL, NULL, next_attempt_at,
           first_delivered_at, last_delivered_at, deliveries, conflicts, claimed_at,
           (SELECT now FROM clock), last_error, requeued_at, origin, traceparent, tracestate, replays
    FROM completed
    RETURNING id, attempt, source, completed_at
),
counted AS (
    INSERT INTO ferry_done_count AS c (source, day, shard, n)
    SELECT source, (completed_at AT TIME ZONE 'UTC')::date, pg_backend_pid() % 16, count(*)
    FROM archived
    GROUP BY 1, 2
    ORDER BY 1, 2
    ON CONFLICT (source, day, shard) DO UPDATE SET n = c.n + excluded.n
),
moved AS (
    DELETE FROM ferry_attempt a
    USING archived
    WHERE a.event_id = archived.id
    RETURNING a.*, archived.attempt AS completing, archived.completed_at
),
ledger AS (
    INSERT INTO ferry_attempt_done (event_id, attempt, worker, started_at, finished_at, outcome, error,
                                    http_status, response, completed_at)
    SELECT event_id, attempt, worker, started_at,
           CASE WHEN attempt = completing THEN completed_at ELSE finished_at END,
           CASE WHEN attempt = completing THEN 'done' ELSE outcome END,
           error,
           CASE WHEN attempt = completing THEN nullif(@http_status::int, 0) ELSE http_status END,
           CASE WHEN attempt = completing THEN nullif(@response::text, '') ELSE response END,
           completed_at
    FROM moved
)
SELECT id FROM archived;
