-- Makes a pending event that is not yet due due now. No row changed: not
-- pending, or already due; nothing changed.
UPDATE ferry_event
SET next_attempt_at = :now
WHERE id = :id
  AND state = 'pending'
  AND next_attempt_at > :now
