-- Deletes done events of the default partition (completions no ranged
-- partition covered) completed longer than @retention_us ago, with their
-- ledger, conflicts, replays, actions and done counts. Normally none:
-- maintenance moves such rows into partitions it creates.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
purged AS (
    DELETE FROM ferry_event_done_default
    WHERE completed_at <= (SELECT now FROM clock) - @retention_us::bigint * interval '1 microsecond'
    RETURNING id, source, completed_at
),
uncounted AS (
    INSERT INTO ferry_done_count AS c (source, day, shard, n)
    SELECT source, (completed_at AT TIME ZONE 'UTC')::date, pg_backend_pid() % 16, -count(*)
    FROM purged
    GROUP BY 1, 2
    ORDER BY 1, 2
    ON CONFLICT (source, day, shard) DO UPDATE SET n = c.n + excluded.n
),
ledger AS (
    DELETE FROM ferry_attempt_done_default a USING purged p WHERE a.event_id = p.id AND a.completed_at = p.completed_at
),
conflicts AS (
    DELETE FROM ferry_conflict WHERE event_id IN (SELECT id FROM purged)
),
replays AS (
    DELETE FROM ferry_replay WHERE event_id IN (SELECT id FROM purged)
),
actions AS (
    DELETE FROM ferry_action WHERE event_id IN (SELECT id FROM purged)
)
SELECT count(*) FROM purged;
