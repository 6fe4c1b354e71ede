-- Purges up to @batch dedupe keys whose first delivery is at least
-- @key_retention_us old and whose event is stored nowhere any more, of one
-- @source ('' for all), and returns their ids for archive_keys_forget.sql.
-- It locks keys only: a receipt locks the key, then the event, so a
-- statement that also deleted events could deadlock with it.
--
-- The keys past the cutoff come oldest first, and each is looked up by id
-- in ferry_event, then in each archive partition, until @batch are found:
-- the cost grows with the keys read, not with the archive. OFFSET 0
-- keeps the lookups from becoming joins, which hashed every archived id
-- even for a run that purged nothing. The cutoff is written out, not read
-- from a clock CTE, so the planner expects the keys actually due rather
-- than a third of the table. The keys found are deleted by ctid, not
-- through a join that may read the whole key table; one a receipt rewrote
-- meanwhile (a new row version) stays, for the next run.
WITH gone AS (
    SELECT k.ctid
    FROM (
        SELECT ctid, id, received_at
        FROM ferry_event_key
        WHERE received_at <= coalesce(@now::timestamptz, statement_timestamp()) - @key_retention_us::bigint * interval '1 microsecond'
          AND (@source::text = '' OR source = @source::text)
        ORDER BY received_at
    ) k
    WHERE NOT EXISTS (SELECT FROM ferry_event e WHERE e.id = k.id OFFSET 0)
      AND NOT EXISTS (SELECT FROM ferry_event_done d WHERE d.id = k.id OFFSET 0)
    ORDER BY k.received_at
    LIMIT @batch::int
)
DELETE FROM ferry_event_key k
WHERE k.ctid = ANY(ARRAY(SELECT ctid FROM gone))
RETURNING k.id;
