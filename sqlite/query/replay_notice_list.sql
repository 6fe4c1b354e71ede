-- One source's ferry_replay rows after a cursor, oldest first, for pushed alerts.
SELECT n.id, n.event_id, e.source, e.event_id, n.received_at
FROM ferry_replay n
JOIN ferry_event e ON e.id = n.event_id
WHERE e.source = :source AND n.id > :after_id
ORDER BY n.id
LIMIT :limit
