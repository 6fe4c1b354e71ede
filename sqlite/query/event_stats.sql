-- One row per source: counts by state, the oldest waiting work (by first
-- delivery, and by when it fell due: a backoff is not waiting), lapsed
-- leases, attempts that never reported, events at risk of outliving the
-- replay window, and the suspected replays counted. :risk is a JSON object {source: microseconds}; other
-- sources are at risk after :default_risk_us, never when it is 0. Times are
-- unix microseconds; :now is the clock. Done events, the history, are only
-- counted, in their partial index, and the replayed ones read: the cost is
-- what is live, not what is stored (reading every event took 1.5 to 4.5 s
-- at a million, near a metrics scrape's 5 s).
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
-- Suspected replays counted (Event.Replays), by source, on the events that
-- keep a ferry_replay row (every replayed event keeps its first).
replays AS (
    SELECT e.source, sum(e.replays) AS n
    FROM ferry_event e
    WHERE e.id IN (SELECT r.event_id FROM ferry_replay r)
    GROUP BY e.source
),
-- The events not done, through ferry_event_state_id.
live AS (
    SELECT e.source, e.state, e.first_delivered_at, e.next_attempt_at, e.claimed_at, e.lease_expires_at,
           e.state IN ('pending', 'in_progress', 'unknown')
               AND coalesce(risk.us, :default_risk_us) > 0
               AND e.first_delivered_at <= :now - coalesce(risk.us, :default_risk_us) AS at_risk
    FROM ferry_event e
    LEFT JOIN risk ON risk.source = e.source
    WHERE e.state IN ('pending', 'in_progress', 'dead', 'unknown')
),
events AS (
    SELECT source,
           sum(state = 'pending')     AS pending,
           sum(state = 'in_progress') AS in_progress,
           0                          AS done,
           sum(state = 'dead')        AS dead,
           sum(state = 'unknown')     AS unknown,
           min(CASE WHEN state = 'pending' THEN first_delivered_at END) AS oldest_pending,
           min(CASE WHEN state = 'pending' AND next_attempt_at <= :now THEN next_attempt_at END) AS oldest_due,
           min(CASE WHEN state = 'in_progress' THEN claimed_at END)     AS oldest_in_progress,
           sum(state = 'in_progress' AND lease_expires_at <= :now)       AS lease_expired,
           sum(at_risk) AS at_risk,
           min(CASE WHEN at_risk THEN first_delivered_at END) AS oldest_at_risk
    FROM live
    GROUP BY source
    UNION ALL
    -- Done events counted in ferry_event_done_completed, never read.
    SELECT source, 0, 0, count(*), 0, 0, NULL, NULL, NULL, 0, 0, NULL
    FROM ferry_event INDEXED BY ferry_event_done_completed
    WHERE state = 'done'
    GROUP BY source
),
totals AS (
    SELECT source,
           sum(pending) AS pending, sum(in_progress) AS in_progress, sum(done) AS done,
           sum(dead) AS dead, sum(unknown) AS unknown,
           min(oldest_pending) AS oldest_pending, min(oldest_due) AS oldest_due,
           min(oldest_in_progress) AS oldest_in_progress, sum(lease_expired) AS lease_expired,
           sum(at_risk) AS at_risk, min(oldest_at_risk) AS oldest_at_risk
    FROM events
    GROUP BY source
)
SELECT totals.*, coalesce(replays.n, 0) AS replays, coalesce(unfinished.n, 0) AS unfinished_attempts
FROM totals
LEFT JOIN replays ON replays.source = totals.source
LEFT JOIN unfinished ON unfinished.source = totals.source
ORDER BY totals.source
