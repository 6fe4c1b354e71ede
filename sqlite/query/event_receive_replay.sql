-- Replay detection, run before a new key is inserted: the oldest event of the
-- source with this payload hash, first delivered within :replay_window_us, if
-- the key itself is new. Writes are serialized, so the lookup and the write
-- that follows are one atomic step.
SELECT e.id
FROM ferry_event e
WHERE e.source = :source
  AND e.payload_sha256 = :payload_sha256
  AND e.first_delivered_at >= :now - :replay_window_us
  AND NOT EXISTS (
      SELECT 1 FROM ferry_event k WHERE k.source = :source AND k.event_id = :event_id
  )
ORDER BY e.id
LIMIT 1
