-- Whether a write could commit now: not on a standby (a failover can leave
-- the store's address on one), not in a session read-only by default
-- (default_transaction_read_only, set on the database or the role); and the
-- session's default isolation, which Ferry's statements need read committed.
SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
       current_setting('default_transaction_isolation')
