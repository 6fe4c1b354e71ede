-- Puts terminal events back to pending, due now, with a fresh attempt budget
-- (attempt_base catches up with attempt; attempt itself never goes down).
-- :ids, when not empty, names the events; :source, :type, :since, :until,
-- :contains and :before ('', NULL or 0 match all) narrow a bulk requeue as
-- EventList's filters do. Pending and in_progress events are never touched.
-- Returns the requeued ids, for event_requeue_action.sql.
UPDATE ferry_event
SET state = 'pending',
    next_attempt_at = :now,
    attempt_base = attempt,
    requeued_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL,
    completed_at = NULL
WHERE state IN (SELECT value FROM json_each(:states))
  AND state NOT IN ('pending', 'in_progress')
  AND (json_array_length(:ids) = 0 OR id IN (SELECT value FROM json_each(:ids)))
  AND (:source = '' OR source = :source)
  AND (:type = '' OR type = :type)
  AND (:since IS NULL OR first_delivered_at >= :since)
  AND (:until IS NULL OR first_delivered_at < :until)
  AND (:contains = '' OR instr(event_id, :contains) > 0)
  AND (:before = 0 OR id < :before)
RETURNING id
