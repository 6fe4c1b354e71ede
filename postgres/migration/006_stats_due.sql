-- Stats read when pending work fell due (ferry_oldest_due_age_seconds) from
-- their index too, so a scrape still never reads the heap: the index gains
-- next_attempt_at. ferry_event holds live events only (done ones are in the
-- archive), so the rebuild takes as long as the backlog is long, with
-- receipts and claims waiting meanwhile.
DROP INDEX IF EXISTS ferry_event_stats;
CREATE INDEX ferry_event_stats ON ferry_event (source, state)
    INCLUDE (first_delivered_at, claimed_at, lease_expires_at, replays, next_attempt_at);
