-- The ranged partitions that hold events: a partition a stopped drop left
-- detached holds none any more.
SELECT count(*)::int, min(from_day), max(to_day), coalesce(@now::timestamptz, statement_timestamp())
FROM ferry_event_done_partition
WHERE NOT detached;
