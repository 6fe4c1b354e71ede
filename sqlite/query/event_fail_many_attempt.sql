-- Closes the ledger rows of :closed (a JSON array of [id, attempt, state,
-- not_run, error, http_status, response] arrays), which the same
-- transaction has just failed: released when no handler ran, else dead or
-- failed by the event's new state (the same rule as
-- postgres/query/event_fail_many.sql's ledger step).
UPDATE ferry_attempt AS a
SET outcome = CASE WHEN c.not_run THEN 'released'
                   WHEN c.state = 'dead' THEN 'dead' ELSE 'failed' END,
    finished_at = :now, error = c.error,
    http_status = nullif(c.http_status, 0), response = nullif(c.response, '')
FROM (
    SELECT value ->> 0 AS id, value ->> 1 AS attempt, value ->> 2 AS state, value ->> 3 AS not_run,
           value ->> 4 AS error, value ->> 5 AS http_status, value ->> 6 AS response
    FROM json_each(:closed)
) AS c
WHERE a.event_id = c.id AND a.attempt = c.attempt
