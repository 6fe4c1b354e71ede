-- Makes a pending event that is not yet due due now, records who asked in
-- the action ledger, and wakes the workers. No row back: not pending, or
-- already due; nothing changed.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
retried AS (
    UPDATE ferry_event
    SET next_attempt_at = (SELECT now FROM clock)
    WHERE id = @id::bigint
      AND state = 'pending'
      AND next_attempt_at > (SELECT now FROM clock)
    RETURNING id
),
action AS (
    INSERT INTO ferry_action (event_id, at, action, actor)
    SELECT id, (SELECT now FROM clock), @action::text, @actor::text FROM retried
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') WHERE EXISTS (SELECT 1 FROM retried)
)
SELECT id FROM retried LEFT JOIN notified ON true;
