-- Extends every lease of :leases (a JSON array of [id, attempt] pairs) that
-- still holds, with EventHeartbeat's fence per lease, and returns the leases
-- it extended.
UPDATE ferry_event
SET lease_expires_at = :now + :ttl_us
WHERE (id, attempt) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:leases))
  AND /* event_lease_held.sql */
RETURNING id, attempt
