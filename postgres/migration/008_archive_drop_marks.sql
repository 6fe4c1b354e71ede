-- A drop's second step deletes the side rows written before its first
-- only. ferry_archive_drop_detached (007) deleted every conflict, replay and
-- action of an event the detached day held, whenever written; but once the
-- detach commits the day's events are gone while their keys stay, so a
-- redelivery is still answered 2xx and keeps a conflict (another body) or a
-- replay (the body under a new key). A run that stopped between the steps
-- (a crash, a lock timeout, a lost lease) had the next run delete those
-- acknowledged rows. They are the key purge's to forget, with the key
-- (archive_keys_forget.sql), as for any event already gone.
--
-- The detach records a mark per side table; the second step deletes the
-- rows at or below it. Ids, not times: received_at and at are the writer's
-- clock at its statement's start, and a writer takes its id before it
-- commits, so neither orders commits by itself. The detach reads max(id),
-- then waits for the transactions writing the table at that moment (LOCK
-- ... IN SHARE MODE, released at once by rolling back a subtransaction):
-- every row at or below the mark got its id before the read, from a writer
-- that holds the table's lock until it commits, so it committed before the
-- detach; every id handed out after the read is above the mark (the
-- identity sequences cache one value, their default). A row written
-- between the read and the detach's commit stays, for the key purge. The
-- waits come first, while the detach holds no lock anyone waits for: a
-- receipt locks the side tables, then the archive; a purge or a requeue
-- the archive, then the side tables. Receipts queue behind a wait only
-- while the receipts begun before it finish.
--
-- A day detached without marks (by 007, its drop stopped before this
-- migration) keeps its side rows: which came after the detach is unknown,
-- so the key purge forgets them all, key_retention after the first delivery.
--
-- Rolling: Ferry from 007 calls ferry_archive_detach and
-- ferry_archive_drop_detached, older ones ferry_archive_drop, all as they
-- were declared; the columns are new and nullable (no rewrite).
ALTER TABLE ferry_event_done_partition
    ADD COLUMN conflict_mark bigint,
    ADD COLUMN replay_mark bigint,
    ADD COLUMN action_mark bigint;

-- The first step: marks the side tables (above), detaches partition part
-- and its ledger's, deletes their days' done counters and marks part
-- detached; returns how many events it held (those counters). A partition
-- already detached, or unknown, is left as it is (0), without a lock. Each
-- wait is bounded by the caller's lock_timeout.
CREATE OR REPLACE FUNCTION ferry_archive_detach(part text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    p ferry_event_done_partition;
    n bigint;
    sides text[] := ARRAY['ferry_conflict', 'ferry_replay', 'ferry_action'];
    marks bigint[] := '{}';
    mark bigint;
BEGIN
    SELECT * INTO p FROM ferry_event_done_partition WHERE name = part;
    IF NOT FOUND OR p.detached THEN
        RETURN 0;
    END IF;
    FOR i IN 1 .. cardinality(sides) LOOP
        EXECUTE format('SELECT coalesce(max(id), 0) FROM %I', sides[i]) INTO mark;
        marks := marks || mark;
        BEGIN
            EXECUTE format('LOCK TABLE %I IN SHARE MODE', sides[i]);
            RAISE SQLSTATE 'FYMRK';
        EXCEPTION WHEN SQLSTATE 'FYMRK' THEN
            NULL; -- the rollback released the lock
        END;
    END LOOP;
    EXECUTE format('ALTER TABLE ferry_event_done DETACH PARTITION %I', part);
    EXECUTE format('ALTER TABLE ferry_attempt_done DETACH PARTITION %I', 'ferry_attempt_done_' || to_char(p.from_day, 'YYYYMMDD'));
    -- After the detach, which waits for completions in flight: a completion
    -- that counts into a day being dropped (a clock off by the retention)
    -- would otherwise wait on this row lock while holding off the detach.
    WITH counted AS (DELETE FROM ferry_done_count c WHERE c.day >= p.from_day AND c.day < p.to_day RETURNING c.n)
    SELECT coalesce(sum(counted.n), 0) INTO n FROM counted;
    UPDATE ferry_event_done_partition
    SET detached = true, conflict_mark = marks[1], replay_mark = marks[2], action_mark = marks[3]
    WHERE name = part;
    RETURN n;
END $$;

-- The second step: deletes the conflicts, replays and actions at or below
-- the marks of the events detached partition part holds, found through its
-- id range, then drops it and its ledger's table and forgets it; returns
-- whether it did. Without a mark it deletes none of that table's. A
-- partition not detached, or unknown, is left as it is (false). It locks
-- the side tables' rows it deletes and the detached tables only: a
-- completion never waits for it.
CREATE OR REPLACE FUNCTION ferry_archive_drop_detached(part text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    p ferry_event_done_partition;
    ledger text;
    lo bigint;
    hi bigint;
    sides text[] := ARRAY['ferry_conflict', 'ferry_replay', 'ferry_action'];
    marks bigint[];
BEGIN
    SELECT * INTO p FROM ferry_event_done_partition WHERE name = part;
    IF NOT FOUND OR NOT p.detached THEN
        RETURN false;
    END IF;
    ledger := 'ferry_attempt_done_' || to_char(p.from_day, 'YYYYMMDD');
    marks := ARRAY[p.conflict_mark, p.replay_mark, p.action_mark];
    EXECUTE format('SELECT min(id), max(id) FROM %I', part) INTO lo, hi;
    FOR i IN 1 .. cardinality(sides) LOOP
        CONTINUE WHEN marks[i] IS NULL;
        EXECUTE format('DELETE FROM %I s WHERE s.event_id BETWEEN $1 AND $2 AND s.id <= $3 AND EXISTS (SELECT FROM %I d WHERE d.id = s.event_id)',
                       sides[i], part) USING lo, hi, marks[i];
    END LOOP;
    EXECUTE format('DROP TABLE %I, %I', part, ledger);
    DELETE FROM ferry_event_done_partition WHERE name = part;
    RETURN true;
END $$;

-- Both steps in the caller's one transaction, for a Ferry from before 007
-- beside this one: no row can come between them, and a row written while
-- the detach waits stays for the key purge. Unchanged but for the steps.
CREATE OR REPLACE FUNCTION ferry_archive_drop(part text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    n := ferry_archive_detach(part);
    PERFORM ferry_archive_drop_detached(part);
    RETURN n;
END $$;
