UPDATE ferry_event
SET state = 'in_progress',
    attempt = attempt + 1,
    lease_owner = :owner,
    lease_expires_at = :lease_expires_at,
    claimed_at = :now
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, source, event_id, type, payload, headers, payload_sha256, state, attempt,
       lease_owner, lease_expires_at, next_attempt_at, first_delivered_at,
       last_delivered_at, deliveries, conflicts, claimed_at, completed_at,
       last_error, requeued_at, origin, replays, traceparent, tracestate, attempt_base
