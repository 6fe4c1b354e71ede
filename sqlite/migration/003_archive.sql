-- SQLite keeps every event in ferry_event (one host, millions of rows at
-- most): the claim already reads only partial indexes of pending and
-- in_progress rows, so done history does not slow it, and the purge's
-- batches walk 001's index of done events by completion time. This adds an
-- index of abandoned attempts, so stats find them without reading the
-- ledger. Nothing moves; no row changes.
CREATE INDEX ferry_attempt_lease_expired ON ferry_attempt (event_id) WHERE outcome = 'lease_expired';
