-- Serializes Migrate across processes until the transaction ends.
SELECT pg_advisory_xact_lock(@key::bigint);
