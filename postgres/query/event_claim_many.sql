-- Leases up to @limit due events to @owner in one statement: due pending
-- events and in_progress events whose lease expired, oldest due first, as
-- many as fit in @max_bytes of payload (the first always; 0 is no bound),
-- skipping rows another claimer has locked. Expired leases of hold sources
-- go to unknown instead. Every claim gets a running ledger row; a previous
-- attempt still running in the ledger is closed as lease_expired (the claim
-- is reclaimed). A claim is previous_unfinished when the event's newest
-- attempt that was not released (a released attempt never ran its handler,
-- or gave it up) is running or lease_expired: a release or a requeue in
-- between does not hide a lapse.
WITH RECURSIVE clock AS (
    SELECT coalesce(@now::timestamptz, statement_timestamp()) AS now
),
-- Rows are locked in id order, as completions lock them, and a row
-- another statement holds is left to a later claim: a late completion of
-- the same leases never waits on this in a cycle.
hold_expired AS (
    SELECT id FROM ferry_event
    WHERE cardinality(@hold_sources::text[]) > 0
      AND state = 'in_progress'
      AND lease_expires_at <= (SELECT now FROM clock)
      AND source = ANY(@hold_sources::text[])
    ORDER BY id
    FOR UPDATE SKIP LOCKED
),
held AS (
    UPDATE ferry_event e
    SET state = 'unknown', lease_owner = NULL, lease_expires_at = NULL
    FROM hold_expired
    WHERE e.id = hold_expired.id
    RETURNING e.id, e.attempt
),
held_ledger AS (
    UPDATE ferry_attempt a
    SET outcome = 'lease_expired', finished_at = (SELECT now FROM clock)
    FROM held
    WHERE a.event_id = held.id AND a.attempt = held.attempt AND a.outcome = 'running'
),
-- The sources claimed: @sources, or when it is empty every source with a
-- pending event, found by one index probe each (a loose scan).
every_source AS (
    (SELECT source FROM ferry_event
     WHERE cardinality(@sources::text[]) = 0 AND state = 'pending'
     ORDER BY source LIMIT 1)
    UNION ALL
    SELECT (SELECT e.source FROM ferry_event e
            WHERE e.state = 'pending' AND e.source > every_source.source
            ORDER BY e.source LIMIT 1)
    FROM every_source
    WHERE every_source.source IS NOT NULL
),
pending_sources AS (
    SELECT DISTINCT source FROM unnest(@sources::text[]) AS s(source)
    UNION ALL
    SELECT source FROM every_source WHERE source IS NOT NULL
),
-- An index scan per source that stops at @limit, rather than one sort of
-- every due event or a pass over other sources' due events. Each source's
-- scan locks what it reads, so with several sources due a claim locks up
-- to @limit of each and keeps the oldest @limit in all; a claim beside it
-- skips the rest until it ends (one statement) and takes the next; a
-- first pass without locks, to lock only what is kept, reads each range
-- twice.
pending_due AS MATERIALIZED (
    SELECT p.*
    FROM pending_sources s
    CROSS JOIN LATERAL (
        SELECT id, attempt, next_attempt_at AS due_at, octet_length(payload) AS size
        FROM ferry_event
        WHERE state = 'pending'
          AND source = s.source
          AND next_attempt_at <= (SELECT now FROM clock)
        ORDER BY next_attempt_at, id
        LIMIT @limit::int
        FOR UPDATE SKIP LOCKED
    ) p
),
-- An expired lease is as old as the moment its event first became due
-- (next_attempt_at, which a claim leaves alone), so a dead worker's events go
-- ahead of newer work instead of waiting behind a backlog.
expired_due AS MATERIALIZED (
    SELECT id, attempt, next_attempt_at AS due_at, octet_length(payload) AS size
    FROM ferry_event
    WHERE state = 'in_progress'
      AND lease_expires_at <= (SELECT now FROM clock)
      AND (cardinality(@sources::text[]) = 0 OR source = ANY(@sources::text[]))
      AND NOT source = ANY(@hold_sources::text[])
    ORDER BY next_attempt_at, id
    LIMIT @limit::int
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT d.id, d.attempt, d.due_at,
           coalesce(r.outcome IN ('running', 'lease_expired'), false) AS previous_unfinished,
           coalesce(r.attempt = d.attempt AND r.outcome = 'running', false) AS reclaimed
    FROM (
        SELECT *, sum(size) OVER w AS total, row_number() OVER w AS n
        FROM (
            SELECT * FROM pending_due
            UNION ALL
            SELECT * FROM expired_due
            ORDER BY due_at, id
            LIMIT @limit::int
        ) u
        WINDOW w AS (ORDER BY due_at, id)
    ) d
    -- One probe of the ledger by key per event, whatever the statistics
    -- say about its size: its newest rows backwards, stopping at the first
    -- that was not released (LIMIT 1 keeps the planner from making it a
    -- join). An event never claimed (attempt 0) has no ledger: its probe
    -- is skipped (a one-time filter), which is most claims.
    LEFT JOIN LATERAL (
        SELECT a.attempt, a.outcome
        FROM ferry_attempt a
        WHERE d.attempt > 0 AND a.event_id = d.id AND a.outcome <> 'released'
        ORDER BY a.attempt DESC
        LIMIT 1
    ) r ON true
    WHERE @max_bytes::bigint = 0 OR d.total <= @max_bytes::bigint OR d.n = 1
),
closed AS (
    UPDATE ferry_attempt a
    SET outcome = 'lease_expired', finished_at = (SELECT now FROM clock)
    FROM due
    -- The array names only the few events whose previous attempt is still
    -- open: on a large ledger a probe by key for each, not a join over it (a
    -- small one the planner may read whole, which costs as little).
    WHERE a.event_id = ANY(ARRAY(SELECT id FROM due WHERE reclaimed))
      AND a.event_id = due.id AND a.attempt = due.attempt AND a.outcome = 'running'
),
claimed AS (
    UPDATE ferry_event e
    SET state            = 'in_progress',
        attempt          = e.attempt + 1,
        lease_owner      = @owner::text,
        lease_expires_at = (SELECT now FROM clock) + @ttl_us::bigint * interval '1 microsecond',
        claimed_at       = (SELECT now FROM clock)
    FROM due
    WHERE e.id = due.id
    RETURNING e.*, due.previous_unfinished, due.reclaimed, due.due_at
),
started AS (
    INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, outcome)
    SELECT id, attempt, lease_owner, claimed_at, 'running'
    FROM claimed
)
SELECT * FROM claimed ORDER BY due_at, id;
