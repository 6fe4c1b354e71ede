-- One page of events, newest first in the result, without payloads or
-- headers, from ferry_event and the archive: each half reads at most @limit
-- rows by index, then the halves merge. The filters are ferry_event_filter's
-- (migration 003), @states, and @lapsed: only events with an attempt closed
-- as lease_expired in the half's own ledger (an event's attempts move with
-- it). @before pages to older events (id DESC); @after to newer ones (id
-- ASC, the lowest above it first; EventList reverses them). The sort key of
-- the unused direction is NULL, which the planner drops.
--
-- A filter other than @source and @lapsed reads each table until @limit
-- rows match: up to all of it when few do. @lapsed reads the ids of the
-- lapsed attempts, few, from the ledger's partial index
-- (ferry_attempt_lease_expired, ferry_attempt_done_lease_expired) into an
-- array once, and each half probes its primary key with id = ANY, in id
-- order: one probe per lapsed attempt (in each archive partition), however
-- many events are stored. (id IN (SELECT ...) under the OR that switches it
-- off would be a filter on every row read.) False, the condition folds to
-- true at plan time, array and all.
--
-- @since also bounds the archive by completion, since an event completes
-- at or after its first delivery (both are stamped by the store's one
-- clock: receipt, then completion or resolve), so the archive's days
-- before @since are never read (pruned at plan time, or at executor start
-- for a cached generic plan).
SELECT * FROM (
    (
        SELECT id, source, event_id, type, payload_sha256, state, attempt, attempt_base,
               lease_owner, lease_expires_at, next_attempt_at, first_delivered_at,
               last_delivered_at, deliveries, conflicts, claimed_at, completed_at,
               last_error, requeued_at, origin, replays
        FROM ferry_event
        WHERE (cardinality(@states::text[]) = 0 OR state = ANY(@states::text[]))
          AND ferry_event_filter(source, type, first_delivered_at, event_id, id,
                                 @source::text, @type::text, @since::timestamptz, @until::timestamptz,
                                 @event_id_like::text, @before::bigint)
          AND (@after::bigint = 0 OR id > @after::bigint)
          AND (NOT @lapsed::boolean
               OR id = ANY(ARRAY(SELECT a.event_id FROM ferry_attempt a WHERE a.outcome = 'lease_expired')))
        ORDER BY CASE WHEN @after::bigint > 0 THEN id END ASC,
                 CASE WHEN @after::bigint = 0 THEN id END DESC
        LIMIT @limit::int
    )
    UNION ALL
    (
        SELECT id, source, event_id, type, payload_sha256, state, attempt, attempt_base,
               lease_owner, lease_expires_at, next_attempt_at, first_delivered_at,
               last_delivered_at, deliveries, conflicts, claimed_at, completed_at,
               last_error, requeued_at, origin, replays
        FROM ferry_event_done
        WHERE (cardinality(@states::text[]) = 0 OR 'done' = ANY(@states::text[]))
          AND completed_at >= coalesce(@since::timestamptz, '-infinity')
          AND ferry_event_filter(source, type, first_delivered_at, event_id, id,
                                 @source::text, @type::text, @since::timestamptz, @until::timestamptz,
                                 @event_id_like::text, @before::bigint)
          AND (@after::bigint = 0 OR id > @after::bigint)
          AND (NOT @lapsed::boolean
               OR id = ANY(ARRAY(SELECT a.event_id FROM ferry_attempt_done a WHERE a.outcome = 'lease_expired')))
        ORDER BY CASE WHEN @after::bigint > 0 THEN id END ASC,
                 CASE WHEN @after::bigint = 0 THEN id END DESC
        LIMIT @limit::int
    )
) page
ORDER BY CASE WHEN @after::bigint > 0 THEN id END ASC,
         CASE WHEN @after::bigint = 0 THEN id END DESC
LIMIT @limit::int;
