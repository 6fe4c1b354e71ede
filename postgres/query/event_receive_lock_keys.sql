-- Locks a receipt batch's known keys in key order (@sources and @event_ids
-- come sorted bytewise, as event_receive_many.sql's arrays are), after the
-- bodies' advisory locks; event_receive_lock_events.sql then locks their
-- events. Every receipt locks a key before its event, so the batch, whose
-- receipts then run in arrival order, takes both kinds in the order every
-- other receipt does.
SELECT count(*)
FROM (
    SELECT k.source
    FROM unnest(@sources::text[], @event_ids::text[]) WITH ORDINALITY AS b(source, event_id, ord)
    JOIN ferry_event_key k ON k.source = b.source AND k.event_id = b.event_id
    ORDER BY b.ord
    FOR NO KEY UPDATE OF k
) locked;
