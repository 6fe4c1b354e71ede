-- Gives a leased event back, pending and due now (graceful shutdown).
-- No row changed means the lease was lost.
UPDATE ferry_event
SET state = 'pending',
    next_attempt_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE id = :id
  AND attempt = :attempt
  AND /* event_lease_held.sql */
