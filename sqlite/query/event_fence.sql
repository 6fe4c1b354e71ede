-- The event as the lease's holder may still see it; no row means lease lost.
SELECT attempt, attempt_base, first_delivered_at, requeued_at
FROM ferry_event
WHERE id = :id
  AND attempt = :attempt
  AND state = 'in_progress'
  AND lease_expires_at > :now
