-- Due events, oldest due first. An expired lease is as old as the moment its
-- event first became due (next_attempt_at, which a claim leaves alone), so a
-- dead worker's events go ahead of newer work instead of waiting behind a
-- backlog. Each half stops at :limit; in_progress rows are few. As many as
-- fit in :max_bytes of payload (the first always; 0 is no bound). Each half
-- names its partial index: without statistics (ANALYZE), the planner takes
-- ferry_event_state_id and sorts every pending row per claim.
SELECT id FROM (
    SELECT id, due, sum(size) OVER w AS total, row_number() OVER w AS n FROM (
        SELECT * FROM (
            SELECT id, next_attempt_at AS due, length(payload) AS size
            FROM ferry_event INDEXED BY ferry_event_pending_due
            WHERE state = 'pending'
              AND next_attempt_at <= :now
              AND (json_array_length(:sources) = 0
                   OR source IN (SELECT value FROM json_each(:sources)))
            ORDER BY next_attempt_at, id
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
