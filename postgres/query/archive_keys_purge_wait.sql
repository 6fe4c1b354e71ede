-- Waits out an archive move's attach in progress (ferry_archive_create)
-- before archive_keys_purge.sql is planned: planned beside it, the purge
-- would look for a moved event in the partitions of before the attach, find
-- it nowhere, and purge the key of an event still stored. It locks what the
-- purge reads, in its order (the archive, then each partition, the default
-- one included), in ACCESS SHARE mode: only an attach or a detach waits for
-- it, and no completion or receipt does.
LOCK TABLE ferry_event_done IN ACCESS SHARE MODE
