-- One row per source: counts by state, the oldest waiting work, lapsed
-- leases, attempts that never reported, events at risk of outliving the
-- replay window (@risk_sources[i] is at risk after @risk_us[i] microseconds;
-- other sources after @default_risk_us, never when it is 0), and the
-- suspected replays kept.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
risk AS (
    SELECT * FROM unnest(@risk_sources::text[], @risk_us::bigint[]) AS r(source, us)
),
unfinished AS (
    SELECT e.source, count(*) AS n
    FROM ferry_attempt a
    JOIN ferry_event e ON e.id = a.event_id
    CROSS JOIN clock
    WHERE a.outcome = 'lease_expired'
       OR (a.outcome = 'running' AND e.state = 'in_progress' AND e.attempt = a.attempt
           AND e.lease_expires_at <= clock.now)
    GROUP BY e.source
),
events AS (
    SELECT e.source,
           count(*) FILTER (WHERE e.state = 'pending')     AS pending,
           count(*) FILTER (WHERE e.state = 'in_progress') AS in_progress,
           count(*) FILTER (WHERE e.state = 'done')        AS done,
           count(*) FILTER (WHERE e.state = 'dead')        AS dead,
           count(*) FILTER (WHERE e.state = 'unknown')     AS unknown,
           min(e.first_delivered_at) FILTER (WHERE e.state = 'pending') AS oldest_pending,
           min(e.claimed_at) FILTER (WHERE e.state = 'in_progress')     AS oldest_in_progress,
           count(*) FILTER (WHERE e.state = 'in_progress' AND e.lease_expires_at <= clock.now) AS lease_expired,
           count(*) FILTER (WHERE e.state IN ('pending', 'in_progress', 'unknown')
                              AND coalesce(risk.us, @default_risk_us::bigint) > 0
                              AND e.first_delivered_at <= clock.now - coalesce(risk.us, @default_risk_us::bigint) * interval '1 microsecond') AS at_risk,
           min(e.first_delivered_at) FILTER (WHERE e.state IN ('pending', 'in_progress', 'unknown')
                              AND coalesce(risk.us, @default_risk_us::bigint) > 0
                              AND e.first_delivered_at <= clock.now - coalesce(risk.us, @default_risk_us::bigint) * interval '1 microsecond') AS oldest_at_risk,
           sum(e.replays)::int AS replays
    FROM ferry_event e
    CROSS JOIN clock
    LEFT JOIN risk ON risk.source = e.source
    GROUP BY e.source
)
SELECT events.*, coalesce(unfinished.n, 0) AS unfinished_attempts, (SELECT now FROM clock) AS now
FROM events
LEFT JOIN unfinished ON unfinished.source = events.source
ORDER BY events.source;
