-- The event wherever it is: ferry_event first (found through its key, which
-- stays while the event is live), then the archive (its newest row, should a
-- key purged past the replay window have come back).
(SELECT e.* FROM ferry_event_key k JOIN ferry_event e ON e.id = k.id
 WHERE k.source = @source::text AND k.event_id = @event_id::text)
UNION ALL
(SELECT * FROM ferry_event_done WHERE source = @source::text AND event_id = @event_id::text
 ORDER BY id DESC LIMIT 1)
LIMIT 1;
