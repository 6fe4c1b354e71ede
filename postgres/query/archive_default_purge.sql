-- Deletes done events of the default partition (completions no ranged
-- partition covered) completed longer than @retention_us ago, and forgets
-- what hangs off them. Normally none: maintenance moves such rows into
-- partitions it creates. Rows are locked in id order first, as every
-- statement that locks several archived rows locks them (event_purge.sql).
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
locked AS (
    SELECT id FROM ferry_event_done_default
    WHERE completed_at <= (SELECT now FROM clock) - @retention_us::bigint * interval '1 microsecond'
    ORDER BY id
    FOR UPDATE
),
purged AS (
    DELETE FROM ferry_event_done_default e
    USING locked
    WHERE e.id = locked.id
    RETURNING e.id, e.source, e.completed_at
)
SELECT ferry_done_forget(array_agg(id), array_agg(source), array_agg(completed_at)) FROM purged;
