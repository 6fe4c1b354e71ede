-- Extends a held lease; the fence is the same as for every write after a claim.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
)
UPDATE ferry_event
SET lease_expires_at = (SELECT now FROM clock) + @ttl_us::bigint * interval '1 microsecond'
WHERE id = @id::bigint
  AND attempt = @attempt::int
  AND /* event_lease_held.sql */
RETURNING lease_expires_at;
