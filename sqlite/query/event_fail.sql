-- Closes a leased attempt as failed: dead when told so, when the attempt
-- budget since the last requeue is spent, or when the event is older than
-- :max_age_us (from its first delivery or last requeue); pending again after
-- the retry delay otherwise. The same rule as postgres/query/event_fail.sql.
-- No row back means the lease was lost.
UPDATE ferry_event
SET state = CASE
        WHEN :dead
          OR (:max_attempts > 0 AND attempt - attempt_base >= :max_attempts)
          OR (:max_age_us > 0
              AND :now - max(first_delivered_at, coalesce(requeued_at, first_delivered_at))
                  >= :max_age_us)
        THEN 'dead' ELSE 'pending' END,
    next_attempt_at = :now + :retry_delay_us,
    last_error = :error,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE id = :id
  AND attempt = :attempt
  AND /* event_lease_held.sql */
RETURNING state
