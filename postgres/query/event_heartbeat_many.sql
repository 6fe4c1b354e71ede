-- Extends every named lease that still holds to @ttl_us from now, in one
-- statement, and returns the leases that did not hold (each once, in the
-- order first named): nothing changes for those. The fence is
-- EventHeartbeat's, per lease. Rows are locked in id order first, so that two
-- batches sharing events wait on each other instead of deadlocking.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
leases AS (
    SELECT id, attempt, min(n) AS first
    FROM unnest(@ids::bigint[], @attempts::int[]) WITH ORDINALITY AS l(id, attempt, n)
    GROUP BY id, attempt
),
held AS (
    SELECT id, attempt FROM ferry_event_lock_held(@ids::bigint[], @attempts::int[], (SELECT now FROM clock))
),
extended AS (
    UPDATE ferry_event e
    SET lease_expires_at = (SELECT now FROM clock) + @ttl_us::bigint * interval '1 microsecond'
    FROM held
    WHERE e.id = held.id
    RETURNING e.id, e.attempt
)
SELECT l.id, l.attempt
FROM leases l
WHERE NOT EXISTS (SELECT 1 FROM extended x WHERE x.id = l.id AND x.attempt = l.attempt)
ORDER BY l.first;
