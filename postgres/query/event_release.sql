-- Gives a leased event back, pending and due now (graceful shutdown), closes
-- its ledger row as released and wakes the workers. No row back means the
-- lease was lost.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
released AS (
    UPDATE ferry_event
    SET state = 'pending', next_attempt_at = (SELECT now FROM clock),
        lease_owner = NULL, lease_expires_at = NULL
    WHERE id = @id::bigint
      AND attempt = @attempt::int
      AND /* event_lease_held.sql */
    RETURNING id, attempt
),
ledger AS (
    UPDATE ferry_attempt a
    SET outcome = 'released', finished_at = (SELECT now FROM clock)
    FROM released
    WHERE a.event_id = released.id AND a.attempt = released.attempt
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '') FROM released
)
-- Joining notified makes PostgreSQL evaluate it.
SELECT id FROM released LEFT JOIN notified ON true;
