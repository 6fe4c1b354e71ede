-- Serializes Migrate across processes until the transaction ends. The key is
-- a constant of Ferry's own ("ferry" in ASCII).
SELECT pg_advisory_xact_lock(439788663417);
