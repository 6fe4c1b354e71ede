-- Fills an installation of schema 002 (the test applies the shipped
-- migrations 001 and 002 first) with an event in every state, each with the
-- ledger, conflicts, replays and actions the old version wrote.
INSERT INTO ferry_event (source, event_id, type, payload, headers, payload_sha256, state, attempt, attempt_base,
                         lease_owner, lease_expires_at, next_attempt_at, first_delivered_at, last_delivered_at,
                         deliveries, conflicts, claimed_at, completed_at, last_error, requeued_at, origin, replays)
VALUES
 ('stripe', 'evt_pending',   'invoice.paid', '{"id":"evt_pending"}',   '{"X-A":["1"]}', sha256('{"id":"evt_pending"}'),   'pending',     0, 0, NULL, NULL, now() - interval '1 minute', now() - interval '1 minute', now() - interval '1 minute', 1, 0, NULL, NULL, NULL, NULL, 'delivery', 0),
 ('stripe', 'evt_retrying',  'invoice.paid', '{"id":"evt_retrying"}',  NULL,            sha256('{"id":"evt_retrying"}'),  'pending',     1, 0, NULL, NULL, now() - interval '1 second', now() - interval '2 hours', now() - interval '1 hour', 2, 0, now() - interval '2 hours', NULL, 'app answered 500', NULL, 'delivery', 0),
 ('stripe', 'evt_leased',    'invoice.paid', '{"id":"evt_leased"}',    NULL,            sha256('{"id":"evt_leased"}'),    'in_progress', 1, 0, 'old-worker', now() - interval '1 second', now() - interval '3 hours', now() - interval '3 hours', now() - interval '3 hours', 1, 0, now() - interval '3 hours', NULL, NULL, NULL, 'delivery', 0),
 ('stripe', 'evt_done',      'invoice.paid', '{"id":"evt_done"}',      '{"X-B":["2"]}', sha256('{"id":"evt_done"}'),      'done',        1, 0, NULL, NULL, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day', 3, 1, now() - interval '2 days', now() - interval '2 days', NULL, NULL, 'delivery', 1),
 ('stripe', 'evt_done_today','invoice.paid', '{"id":"evt_done_today"}',NULL,            sha256('{"id":"evt_done_today"}'),'done',        2, 1, NULL, NULL, now() - interval '1 hour', now() - interval '5 days', now() - interval '5 days', 1, 0, now() - interval '1 hour', now() - interval '50 minutes', 'timeout', now() - interval '1 hour', 'catchup', 0),
 ('github', 'gh_dead',       'push',         '{"id":"gh_dead"}',       NULL,            sha256('{"id":"gh_dead"}'),       'dead',        3, 0, NULL, NULL, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', 1, 0, now() - interval '20 hours', NULL, 'app answered 400', NULL, 'delivery', 0),
 ('github', 'gh_unknown',    'push',         '{"id":"gh_unknown"}',    NULL,            sha256('{"id":"gh_unknown"}'),    'unknown',     1, 0, NULL, NULL, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', 1, 0, now() - interval '1 day', NULL, NULL, NULL, 'delivery', 0);

INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, finished_at, outcome, error, http_status, response)
SELECT e.id, a.attempt, a.worker, now() - a.ago, now() - a.ago + interval '1 second', a.outcome, a.error, a.status, a.response
FROM ferry_event e
JOIN (VALUES
 ('evt_retrying',   1, 'w1', interval '2 hours',   'failed',        'app answered 500', 500, 'oops'),
 ('evt_leased',     1, 'old-worker', interval '3 hours', 'running',  NULL, NULL::int, NULL),
 ('evt_done',       1, 'w1', interval '2 days',    'done',          NULL, 200, 'ok'),
 ('evt_done_today', 1, 'w1', interval '3 hours',   'lease_expired', NULL, NULL, NULL),
 ('evt_done_today', 2, 'w2', interval '1 hour',    'done',          NULL, 200, 'ok'),
 ('gh_dead',        1, 'w1', interval '22 hours',  'failed',        'app answered 500', 500, NULL),
 ('gh_dead',        2, 'w1', interval '21 hours',  'failed',        'app answered 500', 500, NULL),
 ('gh_dead',        3, 'w1', interval '20 hours',  'dead',          'app answered 400', 400, 'bad'),
 ('gh_unknown',     1, 'w9', interval '1 day',     'lease_expired', NULL, NULL, NULL)
) AS a(key, attempt, worker, ago, outcome, error, status, response) ON a.key = e.event_id;
-- A running ledger row has no end yet.
UPDATE ferry_attempt SET finished_at = NULL WHERE outcome = 'running';

INSERT INTO ferry_conflict (event_id, received_at, payload_sha256, payload, headers)
SELECT id, now() - interval '1 day', sha256('other'), 'other', '{"X-C":["3"]}' FROM ferry_event WHERE event_id = 'evt_done';
INSERT INTO ferry_replay (event_id, received_at, claimed_event_id, claimed_type, headers)
SELECT id, now() - interval '1 day', 'evt_copy', 'invoice.paid', NULL FROM ferry_event WHERE event_id = 'evt_done';
INSERT INTO ferry_action (event_id, at, action, actor)
SELECT id, now() - interval '1 hour', 'requeue', 'admin@example.com' FROM ferry_event WHERE event_id = 'evt_done_today';
