-- What migration 003 (archive) would move: every event gets a key, done
-- events move to one partition per completion day.
SELECT count(*),
       count(*) FILTER (WHERE state = 'done'),
       count(DISTINCT (coalesce(completed_at, last_delivered_at) AT TIME ZONE 'UTC')::date) FILTER (WHERE state = 'done')
FROM ferry_event;
