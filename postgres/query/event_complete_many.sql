-- Marks every leased event whose lease still holds done, in one statement:
-- each moves to the archive (ferry_event_done) with its id, its ledger to the
-- archive's (ferry_attempt_done) with the completing attempt closed, and the
-- done counters go up. Returns the leases that did not hold
-- (each once, in the order first named): nothing changes for those. The
-- fence is EventComplete's, per lease. Rows are locked in id order first, so
-- that two batches sharing events wait on each other instead of deadlocking.
-- Each ledger row keeps what its downstream answered (the first naming's; 0
-- and '' are none).
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
leases AS (
    SELECT id, attempt, min(n) AS first,
           (array_agg(http_status ORDER BY n))[1] AS http_status,
           (array_agg(response ORDER BY n))[1] AS response
    FROM unnest(@ids::bigint[], @attempts::int[], @http_statuses::int[], @responses::text[])
         WITH ORDINALITY AS l(id, attempt, http_status, response, n)
    GROUP BY id, attempt
),
held AS (
    SELECT id, attempt FROM ferry_event_lock_held(@ids::bigint[], @attempts::int[], (SELECT now FROM clock))
),
-- held has locked each row as the fence saw it: nothing changes it before
-- this statement ends, so the delete matches on the lease alone.
finished AS (
    DELETE FROM ferry_event e
    USING held
    WHERE e.id = held.id
      AND e.attempt = held.attempt
    RETURNING e.*
),
archived AS /* event_archive_done.sql */,
counted AS (
    SELECT ferry_done_count_add(array_agg(source), array_agg(completed_at), 1) FROM archived
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
    SELECT m.event_id, m.attempt, m.worker, m.started_at,
           CASE WHEN m.attempt = m.completing THEN m.completed_at ELSE m.finished_at END,
           CASE WHEN m.attempt = m.completing THEN 'done' ELSE m.outcome END,
           m.error,
           CASE WHEN m.attempt = m.completing THEN nullif(l.http_status, 0) ELSE m.http_status END,
           CASE WHEN m.attempt = m.completing THEN nullif(l.response, '') ELSE m.response END,
           m.completed_at
    FROM moved m
    LEFT JOIN leases l ON l.id = m.event_id AND l.attempt = m.completing
)
-- A filter on counted alone is checked once, before any row is read, so
-- the counters move even when every lease held and nothing is returned.
SELECT l.id, l.attempt
FROM leases l
WHERE (SELECT true FROM counted)
  AND NOT EXISTS (SELECT 1 FROM archived c WHERE c.id = l.id AND c.attempt = l.attempt)
ORDER BY l.first;
