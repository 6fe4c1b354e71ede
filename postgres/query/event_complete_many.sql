-- Marks every leased event whose lease still holds done and closes its ledger
-- row, in one statement, and returns the leases that did not hold (each once,
-- in the order first named): nothing changes for those. The fence is
-- EventComplete's, per lease. Rows are locked in id order first, so that two
-- batches sharing events wait on each other instead of deadlocking. Each
-- ledger row keeps what its downstream answered (the first naming's; 0 and
-- '' are none).
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
    SELECT e.id, e.attempt
    FROM ferry_event e
    JOIN leases l ON l.id = e.id AND l.attempt = e.attempt
    WHERE e.state = 'in_progress'
      AND e.lease_expires_at > (SELECT now FROM clock)
    ORDER BY e.id
    FOR UPDATE OF e
),
completed AS (
    UPDATE ferry_event e
    SET state = 'done', completed_at = (SELECT now FROM clock),
        lease_owner = NULL, lease_expires_at = NULL
    FROM held
    WHERE e.id = held.id
    RETURNING e.id, e.attempt
),
ledger AS (
    UPDATE ferry_attempt a
    SET outcome = 'done', finished_at = (SELECT now FROM clock),
        http_status = nullif(l.http_status, 0), response = nullif(l.response, '')
    FROM completed
    JOIN leases l ON l.id = completed.id AND l.attempt = completed.attempt
    WHERE a.event_id = completed.id AND a.attempt = completed.attempt
)
SELECT l.id, l.attempt
FROM leases l
WHERE NOT EXISTS (SELECT 1 FROM completed c WHERE c.id = l.id AND c.attempt = l.attempt)
ORDER BY l.first;
