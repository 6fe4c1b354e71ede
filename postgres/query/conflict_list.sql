SELECT event_id, received_at, payload_sha256, payload, headers
FROM ferry_conflict
WHERE event_id = @id::bigint
ORDER BY id
LIMIT @limit::int;
