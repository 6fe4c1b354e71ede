-- Deletes done events of the default partition (completions no ranged
-- partition covered) completed longer than @retention_us ago, and forgets
-- what hangs off them. Normally none: maintenance moves such rows into
-- partitions it creates.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
purged AS (
    DELETE FROM ferry_event_done_default
    WHERE completed_at <= (SELECT now FROM clock) - @retention_us::bigint * interval '1 microsecond'
    RETURNING id, source, completed_at
)
SELECT ferry_done_forget(array_agg(id), array_agg(source), array_agg(completed_at)) FROM purged;
