-- Requeues the events of :source ('' is all) whose state is in :states; the
-- attempt budget restarts.
UPDATE ferry_event
SET state = 'pending',
    next_attempt_at = :now,
    attempt_base = attempt,
    requeued_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL,
    completed_at = NULL
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:source = '' OR source = :source)
