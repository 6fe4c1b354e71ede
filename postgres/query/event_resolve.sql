-- Closes dead or unknown events of @ids by hand, as event_complete_many.sql
-- closes leased ones: each moves to the archive (ferry_event_done) as done,
-- its ledger to the archive's (ferry_attempt_done) as it was (no attempt is
-- closed: none ran), the done counters go up, and ferry_action records who
-- resolved it. Rows are locked in id order first, and only while dead or
-- unknown: an event a requeue or claim has taken meanwhile is left to it.
-- Returns how many events were resolved.
WITH clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
locked AS (
    SELECT id FROM ferry_event
    WHERE id = ANY(@ids::bigint[])
      AND state IN ('dead', 'unknown')
    ORDER BY id
    FOR UPDATE
),
finished AS (
    DELETE FROM ferry_event e
    USING locked
    WHERE e.id = locked.id
    RETURNING e.*
),
archived AS /* event_archive_done.sql */,
counted AS (
    SELECT ferry_done_count_add(array_agg(source), array_agg(completed_at), 1) FROM archived
),
moved AS (
    DELETE FROM ferry_attempt a
    USING archived
    WHERE a.event_id = archived.id
    RETURNING a.*, archived.completed_at
),
ledger AS (
    INSERT INTO ferry_attempt_done (event_id, attempt, worker, started_at, finished_at, outcome, error,
                                    http_status, response, completed_at)
    SELECT event_id, attempt, worker, started_at, finished_at, outcome, error, http_status, response, completed_at
    FROM moved
),
action AS (
    INSERT INTO ferry_action (event_id, at, action, actor)
    SELECT id, (SELECT now FROM clock), @action::text, @actor::text
    FROM archived
    ORDER BY id
)
SELECT count(*) FROM archived WHERE (SELECT true FROM counted);
