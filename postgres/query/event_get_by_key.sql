-- The event wherever it is: ferry_event first, then the archive (its newest
-- row, should a key purged past the replay window have come back).
(SELECT * FROM ferry_event WHERE source = @source::text AND event_id = @event_id::text)
UNION ALL
(SELECT * FROM ferry_event_done WHERE source = @source::text AND event_id = @event_id::text
 ORDER BY id DESC LIMIT 1)
LIMIT 1;
