-- Closes the ledger rows of :leases (a JSON array of [id, attempt,
-- http_status, response], one per lease), which the same transaction has
-- just completed, each with what its downstream answered (0 and '' are
-- none).
UPDATE ferry_attempt
SET outcome = :outcome, finished_at = :now, error = NULL,
    http_status = nullif(l.value ->> 2, 0), response = nullif(l.value ->> 3, '')
FROM json_each(:leases) AS l
WHERE ferry_attempt.event_id = l.value ->> 0 AND ferry_attempt.attempt = l.value ->> 1
