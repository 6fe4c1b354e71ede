-- Takes the named lease, or renews it, when it is free, expired or already
-- @owner's. No row comes back when another owner holds it.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
)
INSERT INTO ferry_lease AS l (name, owner, expires_at)
SELECT @name::text, @owner::text, now + @ttl_us::bigint * interval '1 microsecond'
FROM clock
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE l.owner = excluded.owner OR l.expires_at <= (SELECT now FROM clock)
RETURNING true;
