-- Waits for a Migrate in progress (migration_lock.sql) until the
-- transaction ends, without keeping other readers out.
SELECT pg_advisory_xact_lock_shared(@key::bigint);
