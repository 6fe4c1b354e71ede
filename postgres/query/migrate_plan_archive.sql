-- What migration 003 (archive) would move: every event gets a key, done
-- events and their ledger rows move to one partition per completion day.
SELECT count(*),
       count(*) FILTER (WHERE state = 'done'),
       count(DISTINCT (coalesce(completed_at, last_delivered_at) AT TIME ZONE 'UTC')::date) FILTER (WHERE state = 'done'),
       (SELECT count(*) FROM ferry_attempt a JOIN ferry_event d ON d.id = a.event_id AND d.state = 'done')
FROM ferry_event;
