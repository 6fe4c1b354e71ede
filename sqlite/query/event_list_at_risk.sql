-- Unfinished events older than their source's at-risk age, oldest first,
-- without payloads or headers. Arguments as in event_stats.sql.
WITH risk AS (
    SELECT key AS source, value AS us FROM json_each(:risk)
)
SELECT e.id, e.source, e.event_id, e.type, NULL, NULL, e.payload_sha256, e.state, e.attempt,
       e.lease_owner, e.lease_expires_at, e.next_attempt_at, e.first_delivered_at,
       e.last_delivered_at, e.deliveries, e.conflicts, e.claimed_at, e.completed_at,
       e.last_error, e.requeued_at, e.origin, e.replays, NULL, NULL, e.attempt_base
FROM ferry_event e
LEFT JOIN risk ON risk.source = e.source
WHERE e.state IN ('pending', 'in_progress', 'unknown')
  AND coalesce(risk.us, :default_risk_us) > 0
  AND e.first_delivered_at <= :now - coalesce(risk.us, :default_risk_us)
ORDER BY e.first_delivered_at, e.id
LIMIT :limit
