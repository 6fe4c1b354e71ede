-- Whether the migration ledger exists in the schema Migrate creates it in,
-- current_schema(): to_regclass would also find another inbox's ledger
-- further along a search_path of several schemas, and take its schema for
-- this one's. (The name is compared as it is: a cast to regnamespace would
-- read it again as an identifier, folding a mixed-case name.)
-- Before it, whether there is a current_schema() at all (a search_path
-- naming no schema that exists and the role may use has none), and the
-- search_path.
SELECT current_schema() IS NOT NULL, current_setting('search_path'), EXISTS (
    SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relname = 'ferry_migration' AND n.nspname = current_schema()
);
