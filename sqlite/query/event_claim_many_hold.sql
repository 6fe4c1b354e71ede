-- Expired leases of hold sources go to unknown for a person to decide.
UPDATE ferry_event
SET state = 'unknown', lease_owner = NULL, lease_expires_at = NULL
WHERE state = 'in_progress'
  AND lease_expires_at <= :now
  AND source IN (SELECT value FROM json_each(:hold_sources))
