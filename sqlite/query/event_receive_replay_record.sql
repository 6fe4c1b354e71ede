-- Keeps a replay on the event whose body it carried; event_receive_replay_count.sql counts it.
INSERT INTO ferry_replay (event_id, received_at, claimed_event_id, claimed_type, headers)
VALUES (:id, :now, :event_id, :type, :headers)
