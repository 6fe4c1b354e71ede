-- Due events, oldest due first. An expired lease is as old as the moment its
-- event first became due (next_attempt_at, which a claim leaves alone), so a
-- dead worker's events go ahead of newer work instead of waiting behind a
-- backlog. Pending events are read per source claimed (:sources, or when it
-- is empty every source with a pending event, found by one index probe
-- each), each stopping at :limit, so another source's backlog is never read;
-- in_progress rows are few. As many as fit in :max_bytes of payload (the
-- first always; 0 is no bound). Each read names its partial index: without
-- statistics (ANALYZE), the planner takes ferry_event_state_id and sorts
-- every pending row per claim.
WITH RECURSIVE every_source(source) AS (
    SELECT (SELECT source FROM ferry_event INDEXED BY ferry_event_pending_due_source
            WHERE json_array_length(:sources) = 0 AND state = 'pending'
            ORDER BY source LIMIT 1)
    UNION ALL
    SELECT (SELECT e.source FROM ferry_event e INDEXED BY ferry_event_pending_due_source
            WHERE e.state = 'pending' AND e.source > every_source.source
            ORDER BY e.source LIMIT 1)
    FROM every_source
    WHERE every_source.source IS NOT NULL
),
pending_sources(source) AS (
    SELECT DISTINCT value FROM json_each(:sources)
    UNION ALL
    SELECT source FROM every_source WHERE source IS NOT NULL
)
SELECT id FROM (
    SELECT id, due, sum(size) OVER w AS total, row_number() OVER w AS n FROM (
        SELECT * FROM (
            SELECT e.id, e.next_attempt_at AS due, length(e.payload) AS size
            FROM pending_sources s
            JOIN ferry_event e ON e.id IN (
                SELECT f.id FROM ferry_event f INDEXED BY ferry_event_pending_due_source
                WHERE f.state = 'pending'
                  AND f.source = s.source
                  AND f.next_attempt_at <= :now
                ORDER BY f.next_attempt_at, f.id
                LIMIT :limit
            )
            ORDER BY due, e.id
            LIMIT :limit
        )
        UNION ALL
        SELECT * FROM (
            SELECT id, next_attempt_at AS due, length(payload) AS size
            FROM ferry_event INDEXED BY ferry_event_lease_expiry
            WHERE state = 'in_progress'
              AND lease_expires_at <= :now
              AND (json_array_length(:sources) = 0
                   OR source IN (SELECT value FROM json_each(:sources)))
            ORDER BY next_attempt_at, id
            LIMIT :limit
        )
        ORDER BY due, id
        LIMIT :limit
    )
    WINDOW w AS (ORDER BY due, id)
)
WHERE :max_bytes = 0 OR total <= :max_bytes OR n = 1
ORDER BY due, id
