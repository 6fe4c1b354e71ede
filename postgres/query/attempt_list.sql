SELECT event_id, attempt, worker, started_at, finished_at, outcome, error
FROM ferry_attempt
WHERE event_id = @id::bigint
ORDER BY attempt;
