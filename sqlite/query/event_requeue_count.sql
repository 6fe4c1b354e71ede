-- How many events event_requeue.sql would take now, by its rule
-- (event_requeue_match.sql): a dry run's count, the confirmation of a bulk
-- replay. A read, on a read connection: it never takes the one write
-- connection, so a confirmation page holds up no receipt or claim.
SELECT count(*) FROM ferry_event WHERE /* event_requeue_match.sql */
