-- A receipt batch with a replay window locks its archived events with
-- ferry_event_done_lock (010) before its receipts count deliveries on them,
-- and those counts need the archive's ROW EXCLUSIVE table lock, which
-- archive maintenance's lock stops while it moves rows out of the default
-- partition (then attaches a partition, which waits for every lock on it).
-- The function took only the row locks' weaker table lock: a batch could
-- hold archived rows while it waited for maintenance, which waited for
-- those rows, and PostgreSQL failed one of the two (40P01). It now takes
-- ROW EXCLUSIVE first, as ferry_event_done_redeliver's UPDATE does when
-- planned, so the batch waits before it holds any archived row.
--
-- Rolling: the same signature; an instance of 010 calls it as before.
CREATE OR REPLACE FUNCTION ferry_event_done_lock(event_ids bigint[]) RETURNS SETOF bigint
LANGUAGE sql VOLATILE AS $$
    LOCK TABLE ferry_event_done IN ROW EXCLUSIVE MODE;
    SELECT id FROM ferry_event_done WHERE id = ANY(event_ids) ORDER BY id FOR UPDATE;
$$;
