-- Counts a delivery of a known key; conflict is 1 when its payload differs.
UPDATE ferry_event
SET deliveries = deliveries + 1,
    last_delivered_at = :now,
    conflicts = conflicts + (payload_sha256 <> :payload_sha256)
WHERE source = :source AND event_id = :event_id
RETURNING id, payload_sha256 <> :payload_sha256 AS conflict
