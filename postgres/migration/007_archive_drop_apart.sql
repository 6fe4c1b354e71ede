-- Retention drops a partition in two transactions, so completions wait for
-- the detach's catalog change only. ferry_archive_drop (004) detached the
-- day and then, still holding ACCESS EXCLUSIVE on ferry_event_done and
-- ferry_attempt_done, deleted the day's conflicts, replays and actions and
-- dropped its tables: every completion waited for all of it (2.2 s beside 2M
-- actions). Now ferry_archive_detach detaches the day, deletes its done
-- counters and marks it detached, and its caller commits; then
-- ferry_archive_drop_detached deletes the side rows and drops the tables,
-- holding no lock on either parent.
--
-- A run that stops between the two (a crash, a lock timeout, a lost lease)
-- leaves the day marked detached in ferry_event_done_partition; the next
-- run finishes it. Its events left the archive with the detach: they are
-- past retention, and no statement can reach them any more.
ALTER TABLE ferry_event_done_partition ADD COLUMN detached boolean NOT NULL DEFAULT false;

-- The first step: detaches partition part and its ledger's, deletes their
-- days' done counters and marks part detached; returns how many events it
-- held (those counters). A partition already detached, or unknown, is left
-- as it is (0), without a lock on the parents. A default partition rules
-- out DETACH CONCURRENTLY; the plain detach takes ACCESS EXCLUSIVE on each
-- parent until the caller commits, which it does at once (its wait bounded
-- by the caller's lock_timeout). It waits for the statements that hold the
-- day: a requeue moving an event out of it, a completion counting in.
CREATE FUNCTION ferry_archive_detach(part text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    p ferry_event_done_partition;
    n bigint;
BEGIN
    SELECT * INTO p FROM ferry_event_done_partition WHERE name = part;
    IF NOT FOUND OR p.detached THEN
        RETURN 0;
    END IF;
    EXECUTE format('ALTER TABLE ferry_event_done DETACH PARTITION %I', part);
    EXECUTE format('ALTER TABLE ferry_attempt_done DETACH PARTITION %I', 'ferry_attempt_done_' || to_char(p.from_day, 'YYYYMMDD'));
    -- After the detach, which waits for completions in flight: a completion
    -- that counts into a day being dropped (a clock off by the retention)
    -- would otherwise wait on this row lock while holding off the detach.
    WITH counted AS (DELETE FROM ferry_done_count c WHERE c.day >= p.from_day AND c.day < p.to_day RETURNING c.n)
    SELECT coalesce(sum(counted.n), 0) INTO n FROM counted;
    UPDATE ferry_event_done_partition SET detached = true WHERE name = part;
    RETURN n;
END $$;

-- The second step: deletes the conflicts, replays and actions of the events
-- detached partition part holds, found through its id range, then drops it
-- and its ledger's table and forgets it; returns whether it did. A
-- partition not detached, or unknown, is left as it is (false). It locks
-- the side tables' rows it deletes and the detached tables only: a
-- completion never waits for it. The detached table is what the day held
-- at the detach (a requeue moved an event out before it, or not at all),
-- so no event stored elsewhere loses its side rows.
CREATE FUNCTION ferry_archive_drop_detached(part text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    p ferry_event_done_partition;
    ledger text;
    lo bigint;
    hi bigint;
    side text;
BEGIN
    SELECT * INTO p FROM ferry_event_done_partition WHERE name = part;
    IF NOT FOUND OR NOT p.detached THEN
        RETURN false;
    END IF;
    ledger := 'ferry_attempt_done_' || to_char(p.from_day, 'YYYYMMDD');
    EXECUTE format('SELECT min(id), max(id) FROM %I', part) INTO lo, hi;
    FOREACH side IN ARRAY ARRAY['ferry_conflict', 'ferry_replay', 'ferry_action'] LOOP
        EXECUTE format('DELETE FROM %I s WHERE s.event_id BETWEEN $1 AND $2 AND EXISTS (SELECT FROM %I d WHERE d.id = s.event_id)',
                       side, part) USING lo, hi;
    END LOOP;
    EXECUTE format('DROP TABLE %I, %I', part, ledger);
    DELETE FROM ferry_event_done_partition WHERE name = part;
    RETURN true;
END $$;

-- Both steps in the caller's one transaction, which holds the parents'
-- lock until it commits: what a Ferry from before 007 calls, beside this
-- one in a rolling upgrade (it also finishes a day left detached).
-- Maintenance runs the two steps apart.
CREATE OR REPLACE FUNCTION ferry_archive_drop(part text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    n := ferry_archive_detach(part);
    PERFORM ferry_archive_drop_detached(part);
    RETURN n;
END $$;
