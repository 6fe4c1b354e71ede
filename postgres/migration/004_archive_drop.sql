-- Retention detaches a day's partition before it deletes the day's
-- conflicts, replays and actions, and picks them by what the detached day
-- still holds: an event a requeue brings back out of that day keeps its kept
-- deliveries and its history.
CREATE OR REPLACE FUNCTION ferry_archive_drop(part text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    p ferry_event_done_partition;
    ledger text;
    n bigint;
    lo bigint;
    hi bigint;
    side text;
BEGIN
    SELECT * INTO p FROM ferry_event_done_partition WHERE name = part;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    ledger := 'ferry_attempt_done_' || to_char(p.from_day, 'YYYYMMDD');
    -- A default partition rules out DETACH CONCURRENTLY; the plain detach
    -- holds the parent's lock only for the catalog change (bounded by the
    -- caller's lock_timeout). It waits for the statements that hold the
    -- day: a requeue moving an event out of it, a completion counting in.
    EXECUTE format('ALTER TABLE ferry_event_done DETACH PARTITION %I', part);
    EXECUTE format('ALTER TABLE ferry_attempt_done DETACH PARTITION %I', ledger);
    -- Each statement below reads a snapshot taken after the detach: what
    -- a requeue moved out is no longer in part.
    EXECUTE format('SELECT min(id), max(id) FROM %I', part) INTO lo, hi;
    FOREACH side IN ARRAY ARRAY['ferry_conflict', 'ferry_replay', 'ferry_action'] LOOP
        EXECUTE format('DELETE FROM %I s WHERE s.event_id BETWEEN $1 AND $2 AND EXISTS (SELECT FROM %I d WHERE d.id = s.event_id)',
                       side, part) USING lo, hi;
    END LOOP;
    WITH counted AS (DELETE FROM ferry_done_count c WHERE c.day >= p.from_day AND c.day < p.to_day RETURNING c.n)
    SELECT coalesce(sum(counted.n), 0) INTO n FROM counted;
    EXECUTE format('DROP TABLE %I, %I', part, ledger);
    DELETE FROM ferry_event_done_partition WHERE name = part;
    RETURN n;
END $$;
