-- Closes the ledger row of one attempt with its outcome.
UPDATE ferry_attempt
SET outcome = :outcome, finished_at = :now, error = :error
WHERE event_id = :id AND attempt = :attempt
