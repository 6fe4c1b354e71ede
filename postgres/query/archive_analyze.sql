-- Autovacuum never analyzes a partitioned parent, and the planner's
-- estimates of the archive come from the parent's statistics.
ANALYZE ferry_event_done;
