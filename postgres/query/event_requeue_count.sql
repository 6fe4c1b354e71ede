-- How many events event_requeue.sql would take now, by its rule
-- (event_requeue_match.sql): a dry run's count, the confirmation of a bulk
-- replay. A plain read: no row is locked or written, so a confirmation page
-- leaves no dead tuple in ferry_event, no WAL, and waits for no claim.
SELECT (SELECT count(*) FROM ferry_event WHERE /* event_requeue_match.sql */)
     + (SELECT count(*) FROM ferry_event_done
        -- The archive is read only when done events are asked for.
        WHERE 'done' = ANY(@states::text[]) AND /* event_requeue_match.sql */
          -- Prunes the days before it: an event first delivered since @since
          -- completed since then too.
          AND completed_at >= coalesce(@since::timestamptz, '-infinity'));
