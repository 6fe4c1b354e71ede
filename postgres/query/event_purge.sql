-- Deletes archived done events of one source completed at least
-- @retention_us ago and forgets what hangs off them (ferry_done_forget).
-- Their keys go after, in archive_keys_purge.sql's statement. Partition
-- maintenance (archive_*.sql) drops whole days instead; this serves sources
-- whose retention is shorter than the longest, and rows in the default
-- partition.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
-- Rows are locked in id order first, as a redelivery or a requeue of
-- archived events locks them, so that none of them waits on this in a
-- cycle.
locked AS (
    SELECT id, completed_at FROM ferry_event_done
    WHERE source = @source::text
      AND completed_at <= (SELECT now FROM clock) - @retention_us::bigint * interval '1 microsecond'
    ORDER BY id
    FOR UPDATE
),
-- The delete repeats the condition, so it reads only the days the lock
-- read, not every partition to join them.
purged AS (
    DELETE FROM ferry_event_done e
    USING locked
    WHERE e.source = @source::text
      AND e.completed_at <= (SELECT now FROM clock) - @retention_us::bigint * interval '1 microsecond'
      AND e.id = locked.id AND e.completed_at = locked.completed_at
    RETURNING e.id, e.source, e.completed_at
)
SELECT ferry_done_forget(array_agg(id), array_agg(source), array_agg(completed_at)) FROM purged;
