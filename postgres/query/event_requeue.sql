-- Puts terminal events back to pending, due now, with a fresh attempt budget
-- (attempt_base catches up with attempt; attempt itself never goes down),
-- records who asked for each in ferry_action, and wakes the workers. Dead and
-- unknown events are requeued where they are; done events move back from the
-- archive to ferry_event with their id and ledger, and their day's done
-- counter goes down. Which events it takes is event_requeue_match.sql's rule,
-- the one its dry run counts by (event_requeue_count.sql): pending and
-- in_progress events are never touched.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
-- Rows are locked in id order first, as a resolve or a completion locks
-- them, so that none of them waits on this in a cycle. The rule is this
-- scan's own condition, so a row that changed while this waited for its lock
-- (requeued, then claimed) is checked again and left out.
locked AS (
    SELECT id FROM ferry_event
    WHERE /* event_requeue_match.sql */
    ORDER BY id
    FOR UPDATE
),
requeued AS (
    UPDATE ferry_event e
    SET state = 'pending', next_attempt_at = (SELECT now FROM clock),
        attempt_base = e.attempt, requeued_at = (SELECT now FROM clock),
        lease_owner = NULL, lease_expires_at = NULL, completed_at = NULL
    FROM locked
    WHERE e.id = locked.id
    RETURNING e.id
),
-- The archive's rows are locked after the live rows are (the count of
-- locked, a one-time filter, runs first), as a receipt takes them: a
-- receipt holding a live event and counting a delivery on an archived one
-- would otherwise wait on this while this waits on it. They are locked in
-- id order too, as a redelivery or a purge of archived events locks them.
archive_locked AS (
    -- Named apart from the columns the rule reads, which the delete reads too.
    SELECT id AS locked_id, completed_at AS locked_at FROM ferry_event_done
    -- The archive is read only when done events are asked for.
    WHERE 'done' = ANY(@states::text[]) AND (SELECT count(*) FROM locked) >= 0
      AND /* event_requeue_match.sql */
      -- Prunes the days before it: an event first delivered since @since
      -- completed since then too.
      AND completed_at >= coalesce(@since::timestamptz, '-infinity')
    ORDER BY id
    FOR UPDATE
),
-- The delete repeats the condition, so it reads only what the lock read,
-- not every partition to join them.
unarchived AS (
    DELETE FROM ferry_event_done e
    USING archive_locked l
    WHERE 'done' = ANY(@states::text[])
      AND /* event_requeue_match.sql */
      AND e.completed_at >= coalesce(@since::timestamptz, '-infinity')
      AND e.id = l.locked_id AND e.completed_at = l.locked_at
    RETURNING e.*
),
restored AS (
    INSERT INTO ferry_event (id, source, event_id, type, payload, headers, payload_sha256, state,
                             attempt, attempt_base, lease_owner, lease_expires_at, next_attempt_at,
                             first_delivered_at, last_delivered_at, deliveries, conflicts, claimed_at,
                             completed_at, last_error, requeued_at, origin, traceparent, tracestate, replays)
    SELECT id, source, event_id, type, payload, headers, payload_sha256, 'pending',
           attempt, attempt, NULL, NULL, (SELECT now FROM clock),
           first_delivered_at, last_delivered_at, deliveries, conflicts, claimed_at,
           NULL, last_error, (SELECT now FROM clock), origin, traceparent, tracestate, replays
    FROM unarchived
    RETURNING id
),
-- Their ledger comes back from the archive's with them.
unledgered AS (
    DELETE FROM ferry_attempt_done a
    USING unarchived u
    WHERE a.event_id = u.id AND a.completed_at = u.completed_at
    RETURNING a.*
),
reledgered AS (
    INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, finished_at, outcome, error, http_status, response)
    SELECT event_id, attempt, worker, started_at, finished_at, outcome, error, http_status, response
    FROM unledgered
),
uncounted AS (
    SELECT ferry_done_count_add(array_agg(source), array_agg(completed_at), -1) FROM unarchived
),
action AS (
    INSERT INTO ferry_action (event_id, at, action, actor)
    SELECT id, (SELECT now FROM clock), @action::text, @actor::text
    FROM (SELECT id FROM requeued UNION ALL SELECT id FROM restored) r
    ORDER BY id
),
notified AS (
    SELECT pg_notify(ferry_receipt_channel(), '')
    WHERE EXISTS (SELECT 1 FROM requeued) OR EXISTS (SELECT 1 FROM restored)
)
SELECT (SELECT count(*) FROM requeued) + (SELECT count(*) FROM restored)
FROM uncounted LEFT JOIN notified ON true;
