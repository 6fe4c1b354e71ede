-- Marks a leased event done and closes its ledger row, only while the lease
-- is held: no row back means the lease was lost and nothing changed. The
-- ledger row keeps what the downstream answered (0 and '' are none).
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
completed AS (
    UPDATE ferry_event
    SET state = 'done', completed_at = (SELECT now FROM clock),
        lease_owner = NULL, lease_expires_at = NULL
    WHERE id = @id::bigint
      AND attempt = @attempt::int
      AND state = 'in_progress'
      AND lease_expires_at > (SELECT now FROM clock)
    RETURNING id, attempt
),
ledger AS (
    UPDATE ferry_attempt a
    SET outcome = 'done', finished_at = (SELECT now FROM clock),
        http_status = nullif(@http_status::int, 0), response = nullif(@response::text, '')
    FROM completed
    WHERE a.event_id = completed.id AND a.attempt = completed.attempt
)
SELECT id FROM completed;
