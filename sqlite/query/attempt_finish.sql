-- Closes the ledger row of one attempt with its outcome and what the
-- downstream answered (0 and '' are none).
UPDATE ferry_attempt
SET outcome = :outcome, finished_at = :now, error = :error,
    http_status = nullif(:http_status, 0), response = nullif(:response, '')
WHERE event_id = :id AND attempt = :attempt
