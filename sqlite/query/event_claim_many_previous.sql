-- The events of :ids whose newest attempt that was not released (a released
-- attempt never ran its handler, or gave it up) is running or lease_expired:
-- their claim is PreviousUnfinished, a release or a requeue in between
-- notwithstanding. Run before event_claim_many_close_previous.sql. Per event
-- a probe of the ledger's primary key, its newest rows backwards.
SELECT claimed.value
FROM json_each(:ids) AS claimed
WHERE (
    SELECT a.outcome
    FROM ferry_attempt a
    WHERE a.event_id = claimed.value AND a.outcome <> 'released'
    ORDER BY a.attempt DESC
    LIMIT 1
) IN ('running', 'lease_expired')
