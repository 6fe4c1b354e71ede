SELECT event_id, at, action, actor
FROM ferry_action
WHERE event_id = :id
ORDER BY id
