-- Extends a held lease; the fence is the same as for every write after a claim.
UPDATE ferry_event
SET lease_expires_at = :now + :ttl_us
WHERE id = :id
  AND attempt = :attempt
  AND /* event_lease_held.sql */
RETURNING lease_expires_at
