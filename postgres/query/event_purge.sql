-- Deletes done events of one source completed at least @retention_us ago;
-- their ledger and conflicts go with them (ON DELETE CASCADE).
DELETE FROM ferry_event
WHERE source = @source::text
  AND state = 'done'
  AND completed_at <= coalesce(@now::timestamptz, statement_timestamp()) - @retention_us::bigint * interval '1 microsecond';
