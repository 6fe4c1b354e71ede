-- Forgets what hangs off the events whose keys archive_keys_purge.sql just
-- purged: their conflicts, replays and operator actions. A redelivery of a
-- known key whose event is gone still keeps its conflict, and a statement
-- of its own, after the purge, sees one a receipt committed while the
-- purge waited on its key.
WITH conflicts AS (
    DELETE FROM ferry_conflict WHERE event_id = ANY(@ids::bigint[])
),
replays AS (
    DELETE FROM ferry_replay WHERE event_id = ANY(@ids::bigint[])
)
DELETE FROM ferry_action WHERE event_id = ANY(@ids::bigint[]);
