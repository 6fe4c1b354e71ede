-- Counts deliveries of known keys on their events, wherever they are now:
-- @n[i] deliveries of event @id[i], @conflicts[i] of them conflicting. Run
-- when a receipt's own statement did not find the event (it moved between
-- ferry_event and the archive meanwhile); returns the ids it found.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
d AS (
    SELECT * FROM unnest(@id::bigint[], @n::int[], @conflicts::int[]) AS d(id, n, conflicts)
),
hot AS (
    UPDATE ferry_event e
    SET deliveries = e.deliveries + d.n, last_delivered_at = (SELECT now FROM clock),
        conflicts = e.conflicts + d.conflicts
    FROM d
    WHERE e.id = d.id
    RETURNING e.id
),
archived AS (
    UPDATE ferry_event_done e
    SET deliveries = e.deliveries + d.n, last_delivered_at = (SELECT now FROM clock),
        conflicts = e.conflicts + d.conflicts
    FROM d
    WHERE e.id = d.id
    RETURNING e.id
)
SELECT id FROM hot UNION ALL SELECT id FROM archived;
