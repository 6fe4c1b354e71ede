-- Closes dead or unknown events of :ids (a JSON array of row ids) by hand:
-- each becomes done, completed now, without running again; the attempt
-- ledger is left as it was (no attempt ran). Events in any other state are
-- left as they are. Returns the resolved ids, for event_requeue_action.sql.
UPDATE ferry_event
SET state = 'done',
    completed_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('dead', 'unknown')
RETURNING id
