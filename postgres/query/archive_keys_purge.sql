-- Purges up to @batch dedupe keys whose first delivery is at least
-- @key_retention_us old and whose event is stored nowhere any more, of one
-- @source ('' for all), and returns their ids for archive_keys_forget.sql.
-- It locks keys only: a receipt locks the key, then the event, so a
-- statement that also deleted events could deadlock with it.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
gone AS (
    SELECT k.source, k.event_id
    FROM ferry_event_key k
    WHERE k.received_at <= (SELECT now FROM clock) - @key_retention_us::bigint * interval '1 microsecond'
      AND (@source::text = '' OR k.source = @source::text)
      AND NOT EXISTS (SELECT FROM ferry_event e WHERE e.id = k.id)
      AND NOT EXISTS (SELECT FROM ferry_event_done d WHERE d.id = k.id)
    ORDER BY k.received_at
    LIMIT @batch::int
)
DELETE FROM ferry_event_key k
USING gone
WHERE k.source = gone.source AND k.event_id = gone.event_id
RETURNING k.id;
