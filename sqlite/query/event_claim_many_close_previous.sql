-- Closes the previous attempt of each claimed event if it never reported:
-- the events reclaimed from a lease that lapsed.
UPDATE ferry_attempt
SET outcome = 'lease_expired', finished_at = :now
WHERE outcome = 'running'
  AND (event_id, attempt) IN (
      SELECT id, attempt FROM ferry_event
      WHERE id IN (SELECT value FROM json_each(:ids))
  )
RETURNING event_id
