-- The fence of a write after a claim (heartbeat, release): the
-- event's lease is in progress and has not expired by the statement's
-- clock. A condition on a row of ferry_event, not a statement; each
-- statement matches its own id and attempt, and query.go puts this where it
-- names it. The batch statements lock by the same rule with
-- ferry_event_lock_held (migration 003).
state = 'in_progress' AND lease_expires_at > (SELECT now FROM clock)
