-- The fence of every write after a claim (heartbeat, complete, fail,
-- release): the event's lease is in progress and has not expired by :now.
-- A condition on a row of ferry_event, not a statement; each statement
-- matches its own id and attempt, and query.go puts this where it names it.
state = 'in_progress' AND lease_expires_at > :now
