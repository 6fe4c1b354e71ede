-- Unfinished events older than their source's at-risk age, oldest first,
-- without payloads or headers. Arguments as in event_stats.sql.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
risk AS (
    SELECT * FROM unnest(@risk_sources::text[], @risk_us::bigint[]) AS r(source, us)
)
SELECT e.id, e.source, e.event_id, e.type, e.payload_sha256, e.state, e.attempt, e.attempt_base,
       e.lease_owner, e.lease_expires_at, e.next_attempt_at, e.first_delivered_at,
       e.last_delivered_at, e.deliveries, e.conflicts, e.replays, e.claimed_at, e.completed_at,
       e.last_error, e.requeued_at, e.origin
FROM ferry_event e
CROSS JOIN clock
LEFT JOIN risk ON risk.source = e.source
WHERE e.state IN ('pending', 'in_progress', 'unknown')
  AND coalesce(risk.us, @default_risk_us::bigint) > 0
  AND e.first_delivered_at <= clock.now - coalesce(risk.us, @default_risk_us::bigint) * interval '1 microsecond'
ORDER BY e.first_delivered_at, e.id
LIMIT @limit::int;
