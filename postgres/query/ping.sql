-- Whether a write could commit now: not on a standby (a failover can leave
-- the store's address on one), not in a session read-only by default
-- (default_transaction_read_only, set on the database or the role); the
-- session's default isolation, which Ferry's statements need read committed;
-- and the privileges the session's role lacks on Ferry's tables and their
-- id sequences ("INSERT on ferry_event, ..."; empty for none, and before the
-- first migration), with the role and the tables' schema for the fix. The
-- tables are those beside ferry_event but ferry_migration, which only a
-- migration writes, and the archive's partitions, reached through their
-- parents (a detached one, about to be dropped, keeps its _YYYYMMDD name).
WITH home AS (
    SELECT relnamespace FROM pg_class WHERE oid = to_regclass('ferry_event')
)
SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
       current_setting('default_transaction_isolation'),
       coalesce((SELECT string_agg(p.privilege || ' on ' || c.relname, ', ' ORDER BY c.relname, p.n)
                   FROM pg_class c,
                        (VALUES (1, 'SELECT'), (2, 'INSERT'), (3, 'UPDATE'), (4, 'DELETE'), (5, 'USAGE')) AS p (n, privilege)
                  WHERE c.relnamespace = (SELECT relnamespace FROM home)
                    AND c.relname LIKE 'ferry\_%' AND c.relname <> 'ferry_migration' AND c.relname !~ '_[0-9]{8}$'
                    AND c.relkind IN ('r', 'p', 'S') AND NOT c.relispartition
                    -- Tables take the first four, sequences USAGE; the
                    -- CASE keeps each function off the other's kind.
                    AND NOT CASE WHEN (c.relkind = 'S') <> (p.privilege = 'USAGE') THEN true
                                 WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'USAGE')
                                 ELSE has_table_privilege(c.oid, p.privilege) END), ''),
       quote_ident(current_user),
       coalesce((SELECT quote_ident(nspname) FROM pg_namespace WHERE oid = (SELECT relnamespace FROM home)), '')
