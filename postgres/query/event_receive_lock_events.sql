-- Locks the live events of a receipt batch's known keys in id order, as
-- completions, failures and heartbeats lock them (ferry_event_lock_held),
-- after its keys (event_receive_lock_keys.sql) and before the batch stores
-- its receipts one statement each in arrival order. Those statements then
-- find their rows already held, and the batch never holds one event while
-- it waits for another that a completion holds while waiting for the first.
-- NO KEY UPDATE, as the receipts' own updates take: a row inserted that
-- refers to the event (its key share) does not wait on it. A key first
-- stored by another transaction after this statement's snapshot is not
-- locked here; its event is new, and a completion holding it yet is rare
-- enough to leave to PostgreSQL's deadlock detection.
SELECT count(*)
FROM (
    SELECT e.id
    FROM unnest(@sources::text[], @event_ids::text[]) AS b(source, event_id)
    JOIN ferry_event_key k ON k.source = b.source AND k.event_id = b.event_id
    JOIN ferry_event e ON e.id = k.id
    ORDER BY e.id
    FOR NO KEY UPDATE OF e
) locked;
