-- Closes many leased attempts as failed in one statement (EventFail is a
-- batch of one), each with its own error, delay, budget and age (the same
-- rule as sqlite/query/event_fail_many.sql): dead when told so, when the
-- attempt budget since the last requeue is spent, or when the event is
-- older than its max age (from its first delivery or last requeue);
-- pending again after the retry delay otherwise. The ledger row says
-- released when no handler ran, else dead or failed by the new state (as
-- sqlite/query/event_fail_many_attempt.sql). Returns the id, attempt and
-- new state of each one whose lease held.
-- Rows are locked in id order first, so that two batches sharing events wait
-- on each other instead of deadlocking. Wakes the workers once if any event
-- went back to pending.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
failures AS (
    SELECT *
    FROM unnest(@ids::bigint[], @attempts::int[], @errors::text[], @retry_delays_us::bigint[],
                @max_attempts::int[], @max_ages_us::bigint[], @dead::boolean[], @not_run::boolean[],
                @http_statuses::int[], @responses::text[])
        AS f(id, attempt, error, retry_delay_us, max_attempts, max_age_us, dead, not_run, http_status, response)
),
held AS (
    SELECT id, attempt FROM ferry_event_lock_held(@ids::bigint[], @attempts::int[], (SELECT now FROM clock))
),
failed AS (
    UPDATE ferry_event e
    SET state = CASE
            WHEN f.dead
              OR (f.max_attempts > 0 AND e.attempt - e.attempt_base >= f.max_attempts)
              OR (f.max_age_us > 0
                  AND (SELECT now FROM clock) - greatest(e.first_delivered_at, coalesce(e.requeued_at, e.first_delivered_at))
                      >= f.max_age_us * interval '1 microsecond')
            THEN 'dead' ELSE 'pending' END,
        next_attempt_at  = (SELECT now FROM clock) + f.retry_delay_us * interval '1 microsecond',
        last_error       = f.error,
        lease_owner      = NULL,
        lease_expires_at = NULL
    FROM held
    JOIN failures f ON f.id = held.id AND f.attempt = held.attempt
    WHERE e.id = held.id
    RETURNING e.id, e.attempt, e.state, f.error, f.not_run, f.http_status, f.response
),
ledger AS (
    UPDATE ferry_attempt a
    SET outcome = CASE WHEN failed.not_run THEN 'released'
                       WHEN failed.state = 'dead' THEN 'dead' ELSE 'failed' END,
        finished_at = (SELECT now FROM clock),
        error = failed.error,
        http_status = nullif(failed.http_status, 0), response = nullif(failed.response, '')
    FROM failed
    WHERE a.event_id = failed.id AND a.attempt = failed.attempt
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '')
    WHERE EXISTS (SELECT 1 FROM failed WHERE state = 'pending')
)
-- Joining notified makes PostgreSQL evaluate it.
SELECT failed.id, failed.attempt, failed.state FROM failed LEFT JOIN notified ON true;
