-- Whether the migration ledger exists in the schema Migrate creates it in,
-- current_schema(): to_regclass would also find another inbox's ledger
-- further along a search_path of several schemas, and take its schema for
-- this one's.
SELECT EXISTS (
    SELECT FROM pg_class
     WHERE relname = 'ferry_migration' AND relnamespace = current_schema()::regnamespace
);
