-- Deletes done events of one source completed at least :retention_us ago;
-- their ledger and conflicts go with them (ON DELETE CASCADE).
DELETE FROM ferry_event
WHERE source = :source
  AND state = 'done'
  AND completed_at <= :now - :retention_us
