-- Deletes archived done events of one source completed at least
-- @retention_us ago, with their ledger, conflicts, replays and actions, and
-- takes them off the done counters; then the source's keys received longer
-- ago than both the retention and the replay window, once no event of
-- theirs is stored. Partition maintenance (archive_*.sql) drops whole days
-- instead; this serves sources whose retention is shorter than the
-- longest, and rows in the default partition.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
purged AS (
    DELETE FROM ferry_event_done
    WHERE source = @source::text
      AND completed_at <= (SELECT now FROM clock) - @retention_us::bigint * interval '1 microsecond'
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
    DELETE FROM ferry_attempt_done a USING purged p WHERE a.event_id = p.id AND a.completed_at = p.completed_at
),
conflicts AS (
    DELETE FROM ferry_conflict WHERE event_id IN (SELECT id FROM purged)
),
replays AS (
    DELETE FROM ferry_replay WHERE event_id IN (SELECT id FROM purged)
),
actions AS (
    DELETE FROM ferry_action WHERE event_id IN (SELECT id FROM purged)
),
keys AS (
    DELETE FROM ferry_event_key k
    WHERE k.source = @source::text
      AND k.received_at <= (SELECT now FROM clock)
          - greatest(@retention_us::bigint, @replay_window_us::bigint) * interval '1 microsecond'
      AND NOT EXISTS (SELECT FROM ferry_event e WHERE e.id = k.id)
      AND NOT EXISTS (SELECT FROM ferry_event_done d WHERE d.id = k.id AND d.id NOT IN (SELECT id FROM purged))
)
SELECT count(*) FROM purged;
