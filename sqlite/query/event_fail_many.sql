-- Closes as failed every attempt of :failures (a JSON array of [id, attempt,
-- error, retry_delay_us, max_attempts, max_age_us, dead] arrays) whose lease
-- still holds (EventFail is a batch of one), each with its own fields (the
-- same rule as postgres/query/event_fail_many.sql): dead when told so, when
-- the attempt budget since the last requeue is spent, or when the event is
-- older than max_age_us (from its first delivery or last requeue); pending
-- again after the retry delay otherwise. Returns the id, attempt and new
-- state of each.
UPDATE ferry_event AS e
SET state = CASE
        WHEN f.dead
          OR (f.max_attempts > 0 AND e.attempt - e.attempt_base >= f.max_attempts)
          OR (f.max_age_us > 0
              AND :now - max(e.first_delivered_at, coalesce(e.requeued_at, e.first_delivered_at))
                  >= f.max_age_us)
        THEN 'dead' ELSE 'pending' END,
    next_attempt_at = :now + f.retry_delay_us,
    last_error = f.error,
    lease_owner = NULL,
    lease_expires_at = NULL
FROM (
    SELECT value ->> 0 AS id, value ->> 1 AS attempt, value ->> 2 AS error,
           value ->> 3 AS retry_delay_us, value ->> 4 AS max_attempts,
           value ->> 5 AS max_age_us, value ->> 6 AS dead
    FROM json_each(:failures)
) AS f
WHERE e.id = f.id
  AND e.attempt = f.attempt
  AND /* event_lease_held.sql */
RETURNING id, attempt, state
