-- Closes the ledger row of a released attempt: no handler verdict, so no
-- error and no answer (the same rule as postgres/query/event_release.sql's
-- ledger step).
UPDATE ferry_attempt
SET outcome = 'released', finished_at = :now
WHERE event_id = :id AND attempt = :attempt
