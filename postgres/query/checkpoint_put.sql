-- Sets the named checkpoint, stamped with the database's now. With @lease
-- set, only while @owner holds that lease unexpired (the same clock): no
-- row comes back otherwise, and nothing changes. FOR SHARE holds the lease
-- row to the end of the write: a takeover waits for it, and a takeover
-- already written is read again (its new owner), never the statement's
-- older snapshot.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
)
INSERT INTO ferry_checkpoint AS c (name, value, updated_at)
SELECT @name::text, @value::text, clock.now
FROM clock
WHERE @lease::text = ''
   OR EXISTS (SELECT FROM ferry_lease l
              WHERE l.name = @lease::text AND l.owner = @owner::text AND l.expires_at > clock.now
              FOR SHARE)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
RETURNING true;
