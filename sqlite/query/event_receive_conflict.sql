-- Keeps a conflicting delivery while its event keeps fewer than :notice_keep
-- conflicts (ferry.NoticeKeep) and none with its payload; otherwise it is
-- only counted (event_receive_redeliver.sql).
INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
SELECT :id, :now, :payload_sha256, :payload, :headers
WHERE NOT EXISTS (
          SELECT 1
          FROM (SELECT c.payload_sha256 FROM ferry_conflict c WHERE c.event_id = :id ORDER BY c.id LIMIT :notice_keep) kept
          WHERE kept.payload_sha256 = :payload_sha256
      )
  AND (SELECT count(*) FROM (SELECT 1 FROM ferry_conflict c WHERE c.event_id = :id LIMIT :notice_keep) kept) < :notice_keep
