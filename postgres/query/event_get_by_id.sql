SELECT * FROM ferry_event WHERE id = @id::bigint;
