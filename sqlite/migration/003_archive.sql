-- SQLite keeps every event in ferry_event (one host, millions of rows at
-- most): the claim already reads only partial indexes of pending and
-- in_progress rows, so done history does not slow it. This adds what keeps
-- the rest independent of history: stats find abandoned attempts through an
-- index of just those, and the purge's batches walk done events by
-- completion time. Nothing moves; no row changes.
CREATE INDEX ferry_attempt_lease_expired ON ferry_attempt (event_id) WHERE outcome = 'lease_expired';
