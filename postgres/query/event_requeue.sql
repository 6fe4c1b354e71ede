-- Puts terminal events back to pending, due now, with a fresh attempt budget
-- (attempt_base catches up with attempt; attempt itself never goes down),
-- records who asked for each in ferry_action, and wakes the workers. Pending
-- and in_progress events are never touched. @ids, when not empty, names the
-- events; the other filters narrow a bulk requeue as event_list.sql's do
-- (EventRequeue clears them with @ids).
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
requeued AS (
    UPDATE ferry_event
    SET state = 'pending', next_attempt_at = (SELECT now FROM clock),
        attempt_base = attempt, requeued_at = (SELECT now FROM clock),
        lease_owner = NULL, lease_expires_at = NULL, completed_at = NULL
    WHERE state = ANY(@states::text[])
      AND state NOT IN ('pending', 'in_progress')
      AND (cardinality(@ids::bigint[]) = 0 OR id = ANY(@ids::bigint[]))
      AND (@source::text = '' OR source = @source::text)
      AND (@type::text = '' OR type = @type::text)
      AND (@since::timestamptz IS NULL OR first_delivered_at >= @since::timestamptz)
      AND (@until::timestamptz IS NULL OR first_delivered_at < @until::timestamptz)
      AND (@event_id_like::text = '' OR event_id LIKE @event_id_like::text)
      AND (@before::bigint = 0 OR id < @before::bigint)
    RETURNING id
),
action AS (
    INSERT INTO ferry_action (event_id, at, action, actor)
    SELECT id, (SELECT now FROM clock), @action::text, @actor::text
    FROM requeued
    ORDER BY id
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') WHERE EXISTS (SELECT 1 FROM requeued)
)
SELECT count(*) FROM requeued LEFT JOIN notified ON true;
