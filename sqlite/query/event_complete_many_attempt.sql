-- Closes the ledger rows of :leases (a JSON array of [id, attempt] pairs),
-- which the same transaction has just completed.
UPDATE ferry_attempt
SET outcome = :outcome, finished_at = :now, error = NULL
WHERE (event_id, attempt) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:leases))
