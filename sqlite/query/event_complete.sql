UPDATE ferry_event
SET state = 'done',
    completed_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE id = :id
  AND attempt = :attempt
  AND state = 'in_progress'
  AND lease_expires_at > :now
