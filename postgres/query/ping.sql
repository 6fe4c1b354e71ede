-- Whether a write could commit now: not on a standby (a failover can leave
-- the store's address on one), not in a session read-only by default
-- (default_transaction_read_only, set on the database or the role); the
-- session's default isolation, which Ferry's statements need read committed;
-- and what the session's role may not do that Ferry's statements do ("INSERT
-- on ferry_event, ..."; empty for nothing, and before the first migration),
-- with the GRANTs that would let it. needed is that list, read off the
-- statements in query/ and the functions they call: receipts, claims,
-- verdicts, operator actions, purges, stats and the migration plan every
-- start reads. Not migrations or the archive's partition maintenance,
-- which need the owner (docs/deploy.md); nextval takes USAGE or UPDATE on
-- the sequence. And whether the search_path names no schema that exists
-- and the role may use, with the search_path.
WITH home AS (
    SELECT relnamespace AS nsp FROM pg_class WHERE oid = to_regclass('ferry_event')
),
-- One row an object, in the order the error names them; the objects are
-- looked up by these names, through the catalogs' name indexes.
listed (object_ord, kind, name, privileges) AS (
    VALUES (1, 'TABLE', 'ferry_event', '{SELECT,INSERT,UPDATE,DELETE}'::text[]),
           (2, 'SEQUENCE', 'ferry_event_id_seq', '{USAGE}'),
           (3, 'TABLE', 'ferry_event_key', '{SELECT,INSERT,UPDATE,DELETE}'),
           (4, 'TABLE', 'ferry_attempt', '{SELECT,INSERT,UPDATE,DELETE}'),
           (5, 'TABLE', 'ferry_event_done', '{SELECT,INSERT,UPDATE,DELETE}'),
           (6, 'TABLE', 'ferry_attempt_done', '{SELECT,INSERT,DELETE}'),
           (7, 'TABLE', 'ferry_done_count', '{SELECT,INSERT,UPDATE}'),
           (8, 'TABLE', 'ferry_conflict', '{SELECT,INSERT,DELETE}'),
           (9, 'TABLE', 'ferry_replay', '{SELECT,INSERT,DELETE}'),
           (10, 'TABLE', 'ferry_action', '{SELECT,INSERT,DELETE}'),
           (11, 'TABLE', 'ferry_lease', '{SELECT,INSERT,UPDATE,DELETE}'),
           (12, 'TABLE', 'ferry_checkpoint', '{SELECT,INSERT,UPDATE}'),
           (13, 'TABLE', 'ferry_migration', '{SELECT}'),
           (14, 'TABLE', 'ferry_event_done_partition', '{SELECT}'),
           (15, 'FUNCTION', 'ferry_event_filter', '{EXECUTE}'),
           (16, 'FUNCTION', 'ferry_event_find', '{EXECUTE}'),
           (17, 'FUNCTION', 'ferry_event_lock_held', '{EXECUTE}'),
           (18, 'FUNCTION', 'ferry_event_done_redeliver', '{EXECUTE}'),
           (19, 'FUNCTION', 'ferry_event_done_lock', '{EXECUTE}'),
           (20, 'FUNCTION', 'ferry_done_count_add', '{EXECUTE}'),
           (21, 'FUNCTION', 'ferry_done_forget', '{EXECUTE}'),
           (22, 'FUNCTION', 'ferry_receipt_channel', '{EXECUTE}')
),
needed (ord, kind, name, privilege) AS (
    SELECT l.object_ord * 10 + p.n, l.kind, l.name, p.privilege
      FROM listed l CROSS JOIN LATERAL unnest(l.privileges) WITH ORDINALITY AS p (privilege, n)
),
objects (kind, name, oid, object) AS (
    SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, c.relname, c.oid,
           quote_ident(n.nspname) || '.' || quote_ident(c.relname)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relname IN (SELECT name FROM listed) AND c.relnamespace = (SELECT nsp FROM home)
       AND c.relkind IN ('r', 'p', 'S')
    UNION ALL
    SELECT 'FUNCTION', p.proname, p.oid,
           quote_ident(n.nspname) || '.' || quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')'
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE p.proname IN (SELECT name FROM listed) AND p.pronamespace = (SELECT nsp FROM home)
),
lacking AS (
    SELECT d.ord, d.kind, d.privilege, o.name, o.object
      FROM needed d JOIN objects o ON o.kind = d.kind AND o.name = d.name
     -- Each kind's function gets only its own kind's objects.
     WHERE NOT CASE o.kind WHEN 'TABLE' THEN has_table_privilege(o.oid, d.privilege)
                           WHEN 'SEQUENCE' THEN has_sequence_privilege(o.oid, 'USAGE, UPDATE')
                           ELSE has_function_privilege(o.oid, 'EXECUTE') END
)
SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
       current_setting('default_transaction_isolation'),
       coalesce((SELECT string_agg(privilege || ' on ' || name, ', ' ORDER BY ord) FROM lacking), ''),
       coalesce((SELECT string_agg(format('GRANT %s ON %s %s TO %I', privileges, kind, object, current_user), '; ' ORDER BY first)
                   FROM (SELECT kind, object, string_agg(privilege, ', ' ORDER BY ord) AS privileges, min(ord) AS first
                           FROM lacking GROUP BY kind, object) AS g), ''),
       quote_ident(current_user),
       current_schema() IS NULL, current_setting('search_path')
