UPDATE ferry_event
SET lease_expires_at = :lease_expires_at
WHERE id = :id
  AND attempt = :attempt
  AND state = 'in_progress'
  AND lease_expires_at > :now
