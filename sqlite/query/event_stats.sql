-- One row per source: counts by state, the oldest waiting work (by first
-- delivery, and by when it fell due: a backoff is not waiting), lapsed
-- leases, attempts that never reported, events at risk of outliving the
-- replay window, and the suspected replays counted. :risk is a JSON object {source: microseconds}; other
-- sources are at risk after :default_risk_us, never when it is 0. Times are
-- unix microseconds; :now is the clock.
WITH risk AS (
    SELECT key AS source, value AS us FROM json_each(:risk)
),
-- Attempts closed as lease_expired (through their own partial index), and
-- running attempts whose lease has lapsed (from the in_progress events):
-- never a read of the whole ledger.
unfinished AS (
    SELECT source, count(*) AS n FROM (
        SELECT e.source
        FROM ferry_attempt a INDEXED BY ferry_attempt_lease_expired
        JOIN ferry_event e ON e.id = a.event_id
        WHERE a.outcome = 'lease_expired'
        UNION ALL
        SELECT e.source
        FROM ferry_event e
        JOIN ferry_attempt a ON a.event_id = e.id AND a.attempt = e.attempt
        WHERE e.state = 'in_progress' AND e.lease_expires_at <= :now AND a.outcome = 'running'
    )
    GROUP BY source
),
classified AS (
    SELECT e.*,
           e.state IN ('pending', 'in_progress', 'unknown')
               AND coalesce(risk.us, :default_risk_us) > 0
               AND e.first_delivered_at <= :now - coalesce(risk.us, :default_risk_us) AS at_risk
    FROM ferry_event e
    LEFT JOIN risk ON risk.source = e.source
),
events AS (
    SELECT source,
           sum(state = 'pending')     AS pending,
           sum(state = 'in_progress') AS in_progress,
           sum(state = 'done')        AS done,
           sum(state = 'dead')        AS dead,
           sum(state = 'unknown')     AS unknown,
           min(CASE WHEN state = 'pending' THEN first_delivered_at END) AS oldest_pending,
           min(CASE WHEN state = 'pending' AND next_attempt_at <= :now THEN next_attempt_at END) AS oldest_due,
           min(CASE WHEN state = 'in_progress' THEN claimed_at END)     AS oldest_in_progress,
           sum(state = 'in_progress' AND lease_expires_at <= :now)       AS lease_expired,
           sum(at_risk) AS at_risk,
           min(CASE WHEN at_risk THEN first_delivered_at END) AS oldest_at_risk,
           sum(replays) AS replays
    FROM classified
    GROUP BY source
)
SELECT events.*, coalesce(unfinished.n, 0) AS unfinished_attempts
FROM events
LEFT JOIN unfinished ON unfinished.source = events.source
ORDER BY events.source
