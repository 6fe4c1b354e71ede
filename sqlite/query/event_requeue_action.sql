-- Records who requeued each event of :ids, in the requeue's transaction.
INSERT INTO ferry_action (event_id, at, action, actor)
SELECT value, :now, :action, :actor
FROM json_each(:ids)
ORDER BY value
