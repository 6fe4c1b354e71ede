-- Counts a delivery of a known key; conflict is 1 when its payload differs,
-- both being deliveries: catch-up's copy is never a delivery's bytes.
UPDATE ferry_event
SET deliveries = deliveries + 1,
    last_delivered_at = :now,
    conflicts = conflicts + (origin = 'delivery' AND :origin = 'delivery' AND payload_sha256 <> :payload_sha256)
WHERE source = :source AND event_id = :event_id
RETURNING id, origin = 'delivery' AND :origin = 'delivery' AND payload_sha256 <> :payload_sha256 AS conflict
