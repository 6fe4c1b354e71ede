-- The events a requeue takes, the one rule of event_requeue.sql and of its
-- dry run's count (event_requeue_count.sql): a condition on a row of
-- ferry_event, not a statement; query.go puts it where each names it. Never
-- a live event (pending and in_progress are never requeued); the events
-- :ids names when it is not empty; only :runnable's sources when it is
-- not empty (by :ids too); and EventList's filter (eventFilter in
-- event.go, put in at run time): the states asked for and, in bulk, the
-- source, type, times, id text and bound (EventRequeue clears them with
-- :ids).
state NOT IN ('pending', 'in_progress')
AND (json_array_length(:ids) = 0 OR id IN (SELECT value FROM json_each(:ids)))
AND (json_array_length(:runnable) = 0 OR source IN (SELECT value FROM json_each(:runnable)))
AND /* eventFilter */
