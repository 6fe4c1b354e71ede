-- Counts deliveries of known keys on their events, wherever they are now:
-- @n[i] deliveries of event @id[i], @conflicts[i] of them conflicting, and
-- @replays[i] suspected replays of it. Run when a receipt's own statement
-- did not find the event (it moved between ferry_event and the archive
-- meanwhile); returns the ids it found.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
-- One row per event: an UPDATE changes a row once however many rows join it.
d AS (
    SELECT id, sum(n)::int AS n, sum(conflicts)::int AS conflicts, sum(replays)::int AS replays
    FROM unnest(@id::bigint[], @n::int[], @conflicts::int[], @replays::int[]) AS d(id, n, conflicts, replays)
    GROUP BY id
),
-- Live rows are locked in id order first, as completions lock them, so the
-- two never wait on each other in a cycle.
locked AS (
    SELECT e.id FROM ferry_event e
    WHERE e.id IN (SELECT id FROM d)
    ORDER BY e.id
    FOR UPDATE
),
hot AS (
    UPDATE ferry_event e
    SET deliveries = e.deliveries + d.n, conflicts = e.conflicts + d.conflicts, replays = e.replays + d.replays,
        last_delivered_at = CASE WHEN d.n > 0 THEN (SELECT now FROM clock) ELSE e.last_delivered_at END
    FROM d, locked
    WHERE e.id = d.id AND locked.id = d.id
    RETURNING e.id
),
archived AS (
    SELECT ferry_event_done_redeliver(array_agg(d.id), array_agg(d.n), array_agg(d.conflicts),
                                      array_agg(d.replays), (SELECT now FROM clock)) AS id
    FROM d
    WHERE d.id NOT IN (SELECT id FROM hot)
    HAVING count(*) > 0
)
SELECT id FROM hot UNION ALL SELECT id FROM archived;
