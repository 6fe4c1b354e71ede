-- One source's ferry_replay rows after a cursor, oldest first, for pushed
-- alerts, with their event's key wherever the event is (live or archived).
SELECT n.id, n.event_id, e.source, e.event_id, n.received_at
FROM ferry_replay n
CROSS JOIN LATERAL (
    (SELECT source, event_id FROM ferry_event WHERE id = n.event_id)
    UNION ALL
    (SELECT source, event_id FROM ferry_event_done WHERE id = n.event_id LIMIT 1)
    LIMIT 1
) e
WHERE e.source = @source::text AND n.id > @after_id::bigint
ORDER BY n.id
LIMIT @limit::int;
