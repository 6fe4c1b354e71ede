-- The events a requeue takes, the one rule of event_requeue.sql and of its
-- dry run's count (event_requeue_count.sql): a condition on a row of
-- ferry_event, not a statement; query.go puts it where each names it. A
-- state asked for that is not live (pending and in_progress are never
-- requeued); the events :ids names when it is not empty; and the filters
-- of a bulk requeue, EventList's (:source, :type, :since, :until, :contains
-- and :before; '', NULL or 0 match all; EventRequeue clears them with :ids).
state IN (SELECT value FROM json_each(:states))
AND state NOT IN ('pending', 'in_progress')
AND (json_array_length(:ids) = 0 OR id IN (SELECT value FROM json_each(:ids)))
AND (:source = '' OR source = :source)
AND (:type = '' OR type = :type)
AND (:since IS NULL OR first_delivered_at >= :since)
AND (:until IS NULL OR first_delivered_at < :until)
AND (:contains = '' OR instr(event_id, :contains) > 0)
AND (:before = 0 OR id < :before)
