-- Deletes up to :batch done events of one source completed at least
-- :retention_us ago and first delivered at least :key_retention_us ago
-- (the event row is its own dedupe key; EventPurge passes 0), oldest
-- first; their ledger, conflicts, replays and actions go with them (ON
-- DELETE CASCADE). EventPurge and ArchiveMaintain run it in short
-- transactions until a batch comes back short, so receipts are never kept
-- waiting for long.
DELETE FROM ferry_event
WHERE id IN (
    SELECT id FROM ferry_event
    WHERE source = :source
      AND state = 'done'
      AND completed_at <= :now - :retention_us
      AND first_delivered_at <= :now - :key_retention_us
    ORDER BY completed_at
    LIMIT :batch
)
