-- Redeliveries of done events lock the archive's rows in id order, as every
-- statement that locks several archived rows now does (a purge, a requeue):
-- ferry_event_done_redeliver (003) updated them in the order its join read
-- them, the batch's key order or the heap's, and a batch with a replay
-- window in arrival order, one receipt a statement, while a requeue or a
-- purge took the same rows in the order of its own scan. A receipt batch
-- and a bulk replay of done events sharing two of them could each hold one
-- and wait for the other, and PostgreSQL failed one of the two (40P01).
-- ferry_event_done_lock is new: such a batch locks its archived events
-- with it first.
--
-- Rolling: ferry_event_done_redeliver keeps its signature and what it
-- returns, so an older instance beside this one calls it as before and
-- locks in id order too; only this one calls ferry_event_done_lock.

-- Counts deliveries on done events: counts[i] more deliveries of event
-- event_ids[i], conflicting[i] of them conflicting and replayed[i] suspected
-- replays, at at. Returns the ids it found. A statement calls it only for
-- the keys whose event the hot table did not hold, so receipts of new and
-- live events never reach the archive's partitions (003). Volatile: it reads
-- with its own snapshot, so an event that a completion moved into the
-- archive while the statement ran is found and counted. The rows are locked
-- in id order first, then each is updated through its partition alone (by
-- its completed_at). One statement, so it takes every table lock it needs
-- as it is planned, before it locks a row.
CREATE OR REPLACE FUNCTION ferry_event_done_redeliver(event_ids bigint[], counts int[], conflicting int[], replayed int[], at timestamptz)
RETURNS SETOF bigint
LANGUAGE sql VOLATILE AS $$
    WITH locked AS (
        SELECT e.id, e.completed_at
        FROM ferry_event_done e
        WHERE e.id = ANY(event_ids)
        ORDER BY e.id
        FOR UPDATE
    )
    UPDATE ferry_event_done e
    SET deliveries = e.deliveries + d.n, conflicts = e.conflicts + d.conflicts, replays = e.replays + d.replays,
        last_delivered_at = CASE WHEN d.n > 0 THEN at ELSE e.last_delivered_at END
    FROM locked, unnest(event_ids, counts, conflicting, replayed) AS d(id, n, conflicts, replays)
    WHERE e.id = locked.id AND e.completed_at = locked.completed_at AND d.id = locked.id
    RETURNING e.id
$$;

-- Locks the archived events of event_ids in id order and returns the ids
-- it found: a receipt batch with a replay window, which stores its
-- receipts one statement each in arrival order, locks its known keys'
-- archived events with it first (event_receive_lock_keys.sql), after their
-- live ones, as ferry_event_done_redeliver locks them. A statement calls
-- it only for the keys whose event the hot table did not hold, so a batch
-- of new and live events never plans the archive's partitions. Volatile:
-- it reads with its own snapshot, so an event a completion moved into the
-- archive while the statement waited is found and locked.
CREATE FUNCTION ferry_event_done_lock(event_ids bigint[]) RETURNS SETOF bigint
LANGUAGE sql VOLATILE AS $$
    SELECT id FROM ferry_event_done WHERE id = ANY(event_ids) ORDER BY id FOR UPDATE
$$;
