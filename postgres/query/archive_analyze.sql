-- Autovacuum never analyzes a partitioned parent, and the planner's
-- estimates of the archive come from the parents' statistics.
ANALYZE ferry_event_done, ferry_attempt_done;
