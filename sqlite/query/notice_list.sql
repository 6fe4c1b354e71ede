-- One source's notices of one kind after a cursor, oldest first, for pushed
-- alerts: ferry_conflict rows (:kind 'conflict') or ferry_replay rows
-- ('replay').
SELECT n.id, n.event_id, e.source, e.event_id, n.received_at
FROM (
    SELECT id, event_id, received_at FROM ferry_conflict WHERE :kind = 'conflict'
    UNION ALL
    SELECT id, event_id, received_at FROM ferry_replay WHERE :kind = 'replay'
) n
JOIN ferry_event e ON e.id = n.event_id
WHERE e.source = :source AND n.id > :after_id
ORDER BY n.id
LIMIT :limit
