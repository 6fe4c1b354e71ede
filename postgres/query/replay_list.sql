SELECT event_id, received_at, claimed_event_id, claimed_type, headers
FROM ferry_replay
WHERE event_id = @id::bigint
ORDER BY id
LIMIT @limit::int;
