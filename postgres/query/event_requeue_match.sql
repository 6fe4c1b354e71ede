-- The events a requeue takes, the one rule of event_requeue.sql and of its
-- dry run's count (event_requeue_count.sql): a condition on a row of
-- ferry_event or of the archive, not a statement; query.go puts it where
-- each names it. A state asked for that is not live (pending and
-- in_progress are never requeued); the events @ids names when it is not
-- empty; only @runnable's sources when it is not empty (by @ids too);
-- and the filters of a bulk requeue, EventList's (ferry_event_filter;
-- EventRequeue clears them with @ids). ferry_event holds no done event (its
-- check ferry_event_hot_state), so a done event is taken from the archive.
state = ANY(@states::text[])
AND state NOT IN ('pending', 'in_progress')
AND (cardinality(@ids::bigint[]) = 0 OR id = ANY(@ids::bigint[]))
AND (cardinality(@runnable::text[]) = 0 OR source = ANY(@runnable::text[]))
AND ferry_event_filter(source, type, first_delivered_at, event_id, id,
                       @source::text, @type::text, @since::timestamptz, @until::timestamptz,
                       @event_id_like::text, @before::bigint)
