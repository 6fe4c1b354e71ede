-- An event's ledger, wherever the event is: ferry_attempt while it is live,
-- the archive's ledger once it is done.
SELECT event_id, attempt, worker, started_at, finished_at, outcome, error,
       http_status, response
FROM ferry_attempt
WHERE event_id = @id::bigint
UNION ALL
SELECT event_id, attempt, worker, started_at, finished_at, outcome, error,
       http_status, response
FROM ferry_attempt_done
WHERE event_id = @id::bigint
ORDER BY attempt;
