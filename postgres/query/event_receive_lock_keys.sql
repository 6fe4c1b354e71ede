-- Locks a receipt batch's known keys in key order (@sources and @event_ids
-- come sorted bytewise, as event_receive_many.sql's arrays are), then
-- their live events in id order, as completions, failures and heartbeats
-- lock them (ferry_event_lock_held): after the bodies' advisory locks, and
-- before the batch stores its receipts one statement each in arrival
-- order. Every receipt locks a key before its event, so the batch takes
-- both in the order every other receipt does, and never holds one event
-- while it waits for another that a completion holds while waiting for the
-- first. One statement, one snapshot: an event is locked only with its key.
-- NO KEY UPDATE, the receipts' own lock on both. A key first stored by
-- another transaction after this statement's snapshot is not locked here.
WITH keys AS MATERIALIZED (
    SELECT k.id
    FROM unnest(@sources::text[], @event_ids::text[]) WITH ORDINALITY AS b(source, event_id, ord)
    JOIN ferry_event_key k ON k.source = b.source AND k.event_id = b.event_id
    ORDER BY b.ord
    FOR NO KEY UPDATE OF k
)
SELECT count(*)
FROM (
    SELECT e.id
    FROM ferry_event e
    WHERE e.id IN (SELECT id FROM keys)
    ORDER BY e.id
    FOR NO KEY UPDATE
) locked;
