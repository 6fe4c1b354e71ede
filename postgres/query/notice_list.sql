-- One source's notices of one kind after a cursor, oldest first, for pushed
-- alerts: ferry_conflict rows (@kind 'conflict') or ferry_replay rows
-- ('replay'), with their event's key wherever the event is (live or
-- archived). The kind is a constant of the statement, so only its table is
-- read.
SELECT n.id, n.event_id, e.source, e.event_id, n.received_at
FROM (
    SELECT id, event_id, received_at FROM ferry_conflict WHERE @kind::text = 'conflict'
    UNION ALL
    SELECT id, event_id, received_at FROM ferry_replay WHERE @kind::text = 'replay'
) n
CROSS JOIN LATERAL ferry_event_find(n.event_id) e
WHERE e.source = @source::text AND n.id > @after_id::bigint
ORDER BY n.id
LIMIT @limit::int;
