-- Records who requeued or resolved each event of :ids, in the same transaction.
INSERT INTO ferry_action (event_id, at, action, actor)
SELECT value, :now, :action, :actor
FROM json_each(:ids)
ORDER BY value
