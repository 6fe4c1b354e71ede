-- The second step of a partition drop, in a transaction of its own: deletes
-- the detached day's side rows written before the first step and drops its
-- tables, with no lock on the archive's parents (migrations 007, 008).
-- Returns whether the day was detached.
SELECT ferry_archive_drop_detached(@name::text);
