-- The archive row of an event that is done, for both ways one gets there:
-- completed by its lease holder (event_complete_many.sql) or resolved by
-- hand (event_resolve.sql). The row as it was, done, with no lease,
-- completed at the statement's clock. Reads the statement's clock and
-- finished (the rows it deleted from ferry_event).
INSERT INTO ferry_event_done (id, source, event_id, type, payload, headers, payload_sha256, state,
                              attempt, attempt_base, lease_owner, lease_expires_at, next_attempt_at,
                              first_delivered_at, last_delivered_at, deliveries, conflicts, claimed_at,
                              completed_at, last_error, requeued_at, origin, traceparent, tracestate, replays)
SELECT id, source, event_id, type, payload, headers, payload_sha256, 'done',
       attempt, attempt_base, NULL, NULL, next_attempt_at,
       first_delivered_at, last_delivered_at, deliveries, conflicts, claimed_at,
       (SELECT now FROM clock), last_error, requeued_at, origin, traceparent, tracestate, replays
FROM finished
RETURNING id, attempt, source, completed_at
