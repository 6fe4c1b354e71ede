-- A claim names the sources its worker runs, but read their due events from
-- an index of all pending events, oldest due first, passing over the other
-- sources' as it went: a million due events of a source no worker runs (one
-- taken out of the config, or one whose instance is down) cost every other
-- claim a read of that million. The index now leads with the source, so a
-- claim reads each of its sources' oldest due events and no other's.
-- ferry_event holds live events only, so the build takes as long as the
-- backlog is long, with receipts and claims waiting meanwhile.
-- ferry_event_pending_due stays for instances older than this one, whose
-- claim reads it, beside this one in a rolling upgrade; a later release
-- drops it.
CREATE INDEX IF NOT EXISTS ferry_event_pending_due_source ON ferry_event (source, next_attempt_at, id)
    WHERE state = 'pending';
