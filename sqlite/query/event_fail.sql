UPDATE ferry_event
SET state = :state,
    next_attempt_at = CASE WHEN :state = 'pending'
                           THEN :next_attempt_at ELSE next_attempt_at END,
    last_error = :error,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE id = :id
  AND attempt = :attempt
  AND state = 'in_progress'
  AND lease_expires_at > :now
