-- Deletes up to :batch done events of one source completed at least
-- :retention_us ago, oldest first; their ledger and conflicts go with them
-- (ON DELETE CASCADE). EventPurge runs it in short transactions until a
-- batch comes back short, so receipts are never kept waiting for long.
DELETE FROM ferry_event
WHERE id IN (
    SELECT id FROM ferry_event
    WHERE source = :source
      AND state = 'done'
      AND completed_at <= :now - :retention_us
    ORDER BY completed_at
    LIMIT :batch
)
