-- What maintenance should do now: the days to create partitions for (from
-- the end of the newest partition, or from the retention's start when there
-- is none or it is older, until @ahead_us from now, in spans of @span_days),
-- and the partitions wholly older than @retention_us. The day that holds
-- today comes first: once it exists completions land there, and creating
-- the other days never waits for one (ferry_archive_create). A run that
-- stopped after today's day leaves older days without a partition, their
-- completions in the default partitions: each such day still within the
-- retention gets a partition of its own, so the default partitions empty.
-- A partition a stopped run left detached is dropped whatever its age: its
-- events already left the archive.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
bounds AS (
    SELECT (clock.now AT TIME ZONE 'UTC')::date AS today,
           ((clock.now + @ahead_us::bigint * interval '1 microsecond') AT TIME ZONE 'UTC')::date AS until,
           ((clock.now - @retention_us::bigint * interval '1 microsecond') AT TIME ZONE 'UTC')::date AS expired,
           (SELECT max(to_day) FROM ferry_event_done_partition) AS newest
    FROM clock
)
SELECT action, from_day, to_day, name
FROM (
    SELECT 'create' AS action, d::date AS from_day, (d + @span_days::int * interval '1 day')::date AS to_day, '' AS name,
           d::date <= today AND (d + @span_days::int * interval '1 day')::date > today AS current
    FROM bounds, generate_series(
        greatest(newest, expired)::timestamp,
        until::timestamp,
        @span_days::int * interval '1 day') AS d
    UNION ALL
    SELECT 'create', stray.day, stray.day + 1, '', stray.day = bounds.today
    FROM bounds, (SELECT (completed_at AT TIME ZONE 'UTC')::date AS day FROM ferry_event_done_default
                  UNION
                  SELECT (completed_at AT TIME ZONE 'UTC')::date FROM ferry_attempt_done_default) stray
    WHERE stray.day >= bounds.expired AND stray.day < bounds.newest
      AND NOT EXISTS (SELECT FROM ferry_event_done_partition p WHERE stray.day >= p.from_day AND stray.day < p.to_day)
    UNION ALL
    SELECT 'drop', p.from_day, p.to_day, p.name, false
    FROM ferry_event_done_partition p, bounds
    WHERE p.to_day <= bounds.expired OR p.detached
) steps
ORDER BY action, current DESC, from_day;
