-- One row per source: counts by state, the oldest waiting work (by first
-- delivery, and by when it fell due: a backoff is not waiting), lapsed
-- leases, attempts that never reported, events at risk of outliving the
-- replay window (@risk_sources[i] is at risk after @risk_us[i] microseconds;
-- other sources after @default_risk_us, never when it is 0), and the
-- suspected replays counted. Everything is read from ferry_event (live events
-- only), the done counters, the lease_expired rows of both ledgers and the
-- replay rows, and from the archive only the replayed events, each by id in
-- every partition: the cost is what is live plus the abandoned attempts and
-- replays kept, never the done events stored.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
risk AS (
    SELECT * FROM unnest(@risk_sources::text[], @risk_us::bigint[]) AS r(source, us)
),
-- Attempts closed as lease_expired (few: an index of each ledger holds just
-- those), with their event's source; and running attempts whose lease has
-- lapsed. An attempt whose event is gone has a NULL source, which the final
-- join matches to nothing: a filter on it would run each archive probe twice,
-- and the planner prices a probe at every partition (run-time pruning reads
-- one), which doubled the plan's cost past jit_inline_above_cost.
unfinished AS (
    SELECT source, count(*) AS n FROM (
        SELECT (SELECT e.source FROM ferry_event e WHERE e.id = a.event_id) AS source
        FROM ferry_attempt a
        WHERE a.outcome = 'lease_expired'
        UNION ALL
        SELECT (SELECT d.source FROM ferry_event_done d WHERE d.id = a.event_id AND d.completed_at = a.completed_at)
        FROM ferry_attempt_done a
        WHERE a.outcome = 'lease_expired'
        UNION ALL
        SELECT e.source
        FROM ferry_event e
        JOIN ferry_attempt a ON a.event_id = e.id AND a.attempt = e.attempt
        CROSS JOIN clock
        WHERE e.state = 'in_progress' AND e.lease_expires_at <= clock.now AND a.outcome = 'running'
    ) u
    GROUP BY source
),
-- Suspected replays counted (Event.Replays), by source, on the events that
-- keep a ferry_replay row (every replayed event keeps its first), wherever
-- the event is: the archive is read only for those few.
replays AS (
    SELECT e.source, sum(e.replays)::int AS n
    FROM (SELECT DISTINCT r.event_id FROM ferry_replay r) r
    CROSS JOIN LATERAL ferry_event_find(r.event_id) e
    GROUP BY e.source
),
done AS (
    SELECT source, sum(n)::bigint AS done
    FROM ferry_done_count
    GROUP BY source
    HAVING sum(n) <> 0
),
live AS (
    SELECT e.source,
           count(*) FILTER (WHERE e.state = 'pending')     AS pending,
           count(*) FILTER (WHERE e.state = 'in_progress') AS in_progress,
           count(*) FILTER (WHERE e.state = 'dead')        AS dead,
           count(*) FILTER (WHERE e.state = 'unknown')     AS unknown,
           min(e.first_delivered_at) FILTER (WHERE e.state = 'pending') AS oldest_pending,
           min(e.next_attempt_at) FILTER (WHERE e.state = 'pending' AND e.next_attempt_at <= clock.now) AS oldest_due,
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
SELECT coalesce(live.source, done.source) AS source,
       coalesce(live.pending, 0), coalesce(live.in_progress, 0), coalesce(done.done, 0),
       coalesce(live.dead, 0), coalesce(live.unknown, 0),
       live.oldest_pending, live.oldest_due, live.oldest_in_progress,
       coalesce(live.lease_expired, 0), coalesce(live.at_risk, 0), live.oldest_at_risk,
       coalesce(replays.n, 0) AS replays,
       coalesce(unfinished.n, 0) AS unfinished_attempts, (SELECT now FROM clock) AS now
FROM live
FULL JOIN done ON done.source = live.source
LEFT JOIN unfinished ON unfinished.source = coalesce(live.source, done.source)
LEFT JOIN replays ON replays.source = coalesce(live.source, done.source)
ORDER BY coalesce(live.source, done.source) COLLATE "C"; -- byte order, as SQLite and Go sort
