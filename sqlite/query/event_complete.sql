-- Marks a leased event done, only while the lease is held: no row
-- changed means the lease was lost.
UPDATE ferry_event
SET state = 'done',
    completed_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE id = :id
  AND attempt = :attempt
  AND state = 'in_progress'
  AND lease_expires_at > :now
