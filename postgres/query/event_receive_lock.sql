-- Serializes replay detection per body until the transaction ends: each key
-- stands for one (source, payload hash), so two deliveries of one body under
-- new ids cannot both miss each other and both be stored. The receive
-- statement that follows in the same transaction takes a fresh snapshot and
-- sees the other's committed row. @keys are sorted (one lock order for every
-- transaction); the class is a constant of Ferry's own ("ferr" in ASCII),
-- so the keys never meet another application's one-key advisory locks.
SELECT count(pg_advisory_xact_lock(1717924466, k))
FROM unnest(@keys::int[]) AS u(k);
