-- Deletes archived done events of one source completed at least
-- @retention_us ago and forgets what hangs off them (ferry_done_forget);
-- then the source's keys received longer ago than both the retention and
-- the replay window, once no event of theirs is stored. Partition
-- maintenance (archive_*.sql) drops whole days instead; this serves sources
-- whose retention is shorter than the longest, and rows in the default
-- partition.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
purged AS (
    DELETE FROM ferry_event_done
    WHERE source = @source::text
      AND completed_at <= (SELECT now FROM clock) - @retention_us::bigint * interval '1 microsecond'
    RETURNING id, source, completed_at
),
keys AS (
    DELETE FROM ferry_event_key k
    WHERE k.source = @source::text
      AND k.received_at <= (SELECT now FROM clock)
          - greatest(@retention_us::bigint, @replay_window_us::bigint) * interval '1 microsecond'
      AND NOT EXISTS (SELECT FROM ferry_event e WHERE e.id = k.id)
      AND NOT EXISTS (SELECT FROM ferry_event_done d WHERE d.id = k.id AND d.id NOT IN (SELECT id FROM purged))
)
SELECT ferry_done_forget(array_agg(id), array_agg(source), array_agg(completed_at)) FROM purged;
