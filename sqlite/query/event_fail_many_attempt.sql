-- Closes the ledger rows of :closed (a JSON array of [id, attempt, outcome,
-- error, http_status, response] arrays), which the same transaction has just
-- failed.
UPDATE ferry_attempt AS a
SET outcome = c.outcome, finished_at = :now, error = c.error,
    http_status = nullif(c.http_status, 0), response = nullif(c.response, '')
FROM (
    SELECT value ->> 0 AS id, value ->> 1 AS attempt, value ->> 2 AS outcome, value ->> 3 AS error,
           value ->> 4 AS http_status, value ->> 5 AS response
    FROM json_each(:closed)
) AS c
WHERE a.event_id = c.id AND a.attempt = c.attempt
