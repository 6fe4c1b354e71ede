SELECT * FROM ferry_event WHERE source = @source::text AND event_id = @event_id::text;
