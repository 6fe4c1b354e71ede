-- The event wherever it is: ferry_event first, then the archive.
(SELECT * FROM ferry_event WHERE id = @id::bigint)
UNION ALL
(SELECT * FROM ferry_event_done WHERE id = @id::bigint)
LIMIT 1;
