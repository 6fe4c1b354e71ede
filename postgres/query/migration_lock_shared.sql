-- Waits for a Migrate in progress on this schema (migration_lock.sql)
-- until the transaction ends, without keeping other readers out.
SELECT pg_advisory_xact_lock_shared(@class::int, hashtext(current_schema()));
