-- The first step of a partition drop, committed on its own: detaches the
-- day's partitions and deletes its done counters (migration 007). Returns
-- how many events it held.
SELECT ferry_archive_detach(@name::text);
