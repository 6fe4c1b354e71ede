SELECT event_id, attempt, worker, started_at, finished_at, outcome, error,
       http_status, response
FROM ferry_attempt
WHERE event_id = :id
ORDER BY attempt
