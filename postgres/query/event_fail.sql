-- Closes a leased attempt as failed: dead when told so, when the attempt
-- budget since the last requeue is spent, or when the event is older than
-- @max_age_us (from its first delivery or last requeue); pending again after
-- the retry delay otherwise, which wakes the workers. The same rule as
-- sqlite/query/event_fail.sql. The ledger row says released when no handler
-- ran (@not_run), else dead or failed by the new state (sqlite/fenced.go's
-- failOutcome). No row back means the lease was lost.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
failed AS (
    UPDATE ferry_event
    SET state = CASE
            WHEN @dead::boolean
              OR (@max_attempts::int > 0 AND attempt - attempt_base >= @max_attempts::int)
              OR (@max_age_us::bigint > 0
                  AND (SELECT now FROM clock) - greatest(first_delivered_at, coalesce(requeued_at, first_delivered_at))
                      >= @max_age_us::bigint * interval '1 microsecond')
            THEN 'dead' ELSE 'pending' END,
        next_attempt_at  = (SELECT now FROM clock) + @retry_delay_us::bigint * interval '1 microsecond',
        last_error       = @error::text,
        lease_owner      = NULL,
        lease_expires_at = NULL
    WHERE id = @id::bigint
      AND attempt = @attempt::int
      AND /* event_lease_held.sql */
    RETURNING id, attempt, state
),
ledger AS (
    UPDATE ferry_attempt a
    SET outcome = CASE WHEN @not_run::boolean THEN 'released'
                       WHEN failed.state = 'dead' THEN 'dead' ELSE 'failed' END,
        finished_at = (SELECT now FROM clock),
        error = @error::text,
        http_status = nullif(@http_status::int, 0), response = nullif(@response::text, '')
    FROM failed
    WHERE a.event_id = failed.id AND a.attempt = failed.attempt
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') FROM failed WHERE state = 'pending'
)
-- Joining notified makes PostgreSQL evaluate it.
SELECT state FROM failed LEFT JOIN notified ON true;
