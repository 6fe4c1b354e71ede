-- Marks done every event of :leases (a JSON array of [id, attempt] pairs)
-- whose lease still holds, with EventComplete's fence per lease, and returns
-- the leases it completed.
UPDATE ferry_event
SET state = 'done',
    completed_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL
WHERE (id, attempt) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:leases))
  AND /* event_lease_held.sql */
RETURNING id, attempt
