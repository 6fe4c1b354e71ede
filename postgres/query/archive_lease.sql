-- Takes the archive maintenance lease for @owner until @ttl_us from now,
-- unless another owner holds it unexpired. A row back means it is held.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
)
INSERT INTO ferry_lease AS l (name, owner, expires_at)
SELECT 'ferry_archive_maintenance', @owner::text, now + @ttl_us::bigint * interval '1 microsecond'
FROM clock
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE l.owner = excluded.owner OR l.expires_at <= (SELECT now FROM clock)
RETURNING owner;
