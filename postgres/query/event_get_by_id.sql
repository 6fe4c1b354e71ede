-- The event wherever it is (ferry_event_find: ferry_event, then the archive).
SELECT * FROM ferry_event_find(@id::bigint);
