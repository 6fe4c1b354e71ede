INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
VALUES (:id, :now, :payload_sha256, :payload, :headers)
