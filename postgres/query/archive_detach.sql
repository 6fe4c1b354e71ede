-- The first step of a partition drop, committed on its own: marks the side
-- tables, detaches the day's partitions and deletes its done counters
-- (migrations 007, 008). Returns how many events it held.
SELECT ferry_archive_detach(@name::text);
