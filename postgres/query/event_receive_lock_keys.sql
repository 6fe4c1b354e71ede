-- Locks a receipt batch's known keys in key order (@sources and @event_ids
-- come sorted bytewise, as event_receive_many.sql's arrays are), then
-- their live events in id order, as completions, failures and heartbeats
-- lock them (ferry_event_lock_held), then their archived events in id
-- order, as a requeue or a purge of archived events locks them: after the
-- bodies' advisory locks, and before the batch stores its receipts one
-- statement each in arrival order. Every receipt locks a key before its
-- event, and a live event before an archived one, so the batch takes them
-- all in the order every other receipt does, and never holds one event
-- while it waits for another that a completion, a requeue or a purge holds
-- while waiting for the first. One statement, one snapshot for the keys
-- and the live events: an event is locked only with its key. NO KEY
-- UPDATE, the receipts' own lock on keys and live events. A key first
-- stored by another transaction after this statement's snapshot is not
-- locked here.
WITH keys AS MATERIALIZED (
    SELECT k.id
    FROM unnest(@sources::text[], @event_ids::text[]) WITH ORDINALITY AS b(source, event_id, ord)
    JOIN ferry_event_key k ON k.source = b.source AND k.event_id = b.event_id
    ORDER BY b.ord
    FOR NO KEY UPDATE OF k
),
live AS MATERIALIZED (
    SELECT e.id
    FROM ferry_event e
    WHERE e.id IN (SELECT id FROM keys)
    ORDER BY e.id
    FOR NO KEY UPDATE
),
-- Keys whose event the hot table did not hold: done, or moved. Only once
-- every live event is locked: the function runs after the aggregate, and a
-- key not in live has read all of it. Through a function, so a batch of
-- new and live events never plans the archive's partitions
-- (ferry_event_done_lock, migration 010).
archived AS (
    SELECT ferry_event_done_lock(array_agg(k.id)) AS id
    FROM keys k
    WHERE k.id NOT IN (SELECT id FROM live)
    HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM live) + (SELECT count(*) FROM archived);
