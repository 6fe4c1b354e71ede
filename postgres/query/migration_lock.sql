-- Serializes Migrate across processes until the transaction ends. The key
-- is the schema's, so inboxes in other schemas of the database never wait.
SELECT pg_advisory_xact_lock(@class::int, hashtext(current_schema()));
