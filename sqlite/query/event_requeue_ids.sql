-- Requeues the events in :ids whose state is in :states; the attempt budget
-- restarts.
UPDATE ferry_event
SET state = 'pending',
    next_attempt_at = :now,
    attempt_base = attempt,
    requeued_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL,
    completed_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN (SELECT value FROM json_each(:states))
