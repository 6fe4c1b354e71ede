-- Keeps a replay on the event whose body it carried while the event keeps
-- fewer than :notice_keep (ferry.NoticeKeep); event_receive_replay_count.sql
-- counts it either way.
INSERT INTO ferry_replay (event_id, received_at, claimed_event_id, claimed_type, headers)
SELECT :id, :now, :event_id, :type, :headers
WHERE (SELECT count(*) FROM (SELECT 1 FROM ferry_replay r WHERE r.event_id = :id LIMIT :notice_keep) kept) < :notice_keep
