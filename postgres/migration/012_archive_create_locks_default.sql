-- Archive maintenance moves a day's rows out of the default partitions,
-- then attaches the day's partition, which takes the default partition's
-- ACCESS EXCLUSIVE lock. ferry_archive_create (003) locked the moved rows
-- as its DELETE reached them, holding no table lock that stops a receipt:
-- a receipt batch counting a delivery on an archived event of that day
-- holds the default partition's ROW EXCLUSIVE lock and waits for its row,
-- which the move holds; the attach then waits for the receipt, and
-- PostgreSQL failed one of the two (40P01) whatever the rows' order. The
-- function now takes the default partitions' EXCLUSIVE lock before it
-- moves a row (after the parents' lock, when it takes that): a receipt,
-- requeue or purge of archived events either ends before the move or
-- waits for it before it holds a row. Reads go on (EXCLUSIVE lets
-- SELECT through) until the attach, as before.
--
-- Rolling: the same name and signature; an older instance's maintenance
-- calls the new one.
ALTER FUNCTION ferry_archive_create(date, date, timestamptz) RENAME TO ferry_archive_move;

CREATE FUNCTION ferry_archive_create(from_day date, to_day date, at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := 'ferry_event_done_' || to_char(from_day, 'YYYYMMDD');
    lo timestamptz := from_day::timestamp AT TIME ZONE 'UTC';
    hi timestamptz := to_day::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF EXISTS (SELECT FROM ferry_event_done_partition p WHERE p.name = part) THEN
        RETURN false;
    END IF;
    -- The range that holds now locks the parents first (ferry_archive_move
    -- says why); the default partitions after, in the same order, events
    -- before ledger.
    IF hi > at - interval '1 hour' AND lo <= at + interval '1 hour' THEN
        LOCK TABLE ferry_event_done, ferry_attempt_done IN SHARE ROW EXCLUSIVE MODE;
    END IF;
    LOCK TABLE ferry_event_done_default, ferry_attempt_done_default IN EXCLUSIVE MODE;
    RETURN ferry_archive_move(from_day, to_day, at);
END $$;
