-- Due events, oldest due first: pending ones by next attempt time, expired
-- leases by expiry. Each half walks its partial index and stops at :limit.
SELECT id FROM (
    SELECT * FROM (
        SELECT id, next_attempt_at AS due FROM ferry_event
        WHERE state = 'pending'
          AND next_attempt_at <= :now
          AND (json_array_length(:sources) = 0
               OR source IN (SELECT value FROM json_each(:sources)))
        ORDER BY next_attempt_at, id
        LIMIT :limit
    )
    UNION ALL
    SELECT * FROM (
        SELECT id, lease_expires_at AS due FROM ferry_event
        WHERE state = 'in_progress'
          AND lease_expires_at <= :now
          AND (json_array_length(:sources) = 0
               OR source IN (SELECT value FROM json_each(:sources)))
        ORDER BY lease_expires_at, id
        LIMIT :limit
    )
)
ORDER BY due, id
LIMIT :limit
