INSERT INTO ferry_event (
    source, event_id, type, payload, headers, payload_sha256,
    next_attempt_at, first_delivered_at, last_delivered_at, origin,
    traceparent, tracestate
) VALUES (
    :source, :event_id, :type, :payload, :headers, :payload_sha256,
    :now, :now, :now, :origin,
    nullif(:traceparent, ''), nullif(:tracestate, '')
)
ON CONFLICT (source, event_id) DO NOTHING
RETURNING id
