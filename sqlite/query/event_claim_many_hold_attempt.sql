-- Closes the running attempt of every expired lease of a hold source.
UPDATE ferry_attempt
SET outcome = 'lease_expired', finished_at = :now
WHERE outcome = 'running'
  AND (event_id, attempt) IN (
      SELECT id, attempt FROM ferry_event
      WHERE state = 'in_progress'
        AND lease_expires_at <= :now
        AND source IN (SELECT value FROM json_each(:hold_sources))
  )
