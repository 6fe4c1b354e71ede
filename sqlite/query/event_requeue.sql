-- Puts terminal events back to pending, due now, with a fresh attempt budget
-- (attempt_base catches up with attempt; attempt itself never goes down).
-- Which events it takes is event_requeue_match.sql's rule, the one its dry
-- run counts by (event_requeue_count.sql): pending and in_progress events
-- are never touched. Returns the requeued ids, for event_requeue_action.sql.
UPDATE ferry_event
SET state = 'pending',
    next_attempt_at = :now,
    attempt_base = attempt,
    requeued_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL,
    completed_at = NULL
WHERE /* event_requeue_match.sql */
RETURNING id
