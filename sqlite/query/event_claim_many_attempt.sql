INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, outcome)
SELECT id, attempt, :owner, :now, 'running'
FROM ferry_event
WHERE id IN (SELECT value FROM json_each(:ids))
