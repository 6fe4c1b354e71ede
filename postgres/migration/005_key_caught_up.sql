-- A key first stored by catch-up holds the hash of the provider API's copy
-- of the event, which is never the bytes a delivery carries (Stripe lists
-- events in another layout, with a later pending_webhooks): comparing a
-- delivery's hash with it would keep every later delivery of the event as a
-- conflict. caught_up marks such keys; receipts compare bytes only between
-- deliveries (event_receive.sql, event_receive_many.sql).
--
-- Existing installations: keys of events that catch-up stored, wherever the
-- event is kept, are marked. Adding a column with a constant default
-- rewrites nothing; the marking reads both event tables whole (origin has no
-- index) while the column's lock makes receipts wait. Keys whose events were
-- purged stay unmarked.
ALTER TABLE ferry_event_key ADD COLUMN IF NOT EXISTS caught_up boolean NOT NULL DEFAULT false;

UPDATE ferry_event_key k
SET caught_up = true
FROM (SELECT source, event_id FROM ferry_event WHERE origin = 'catchup'
      UNION ALL
      SELECT source, event_id FROM ferry_event_done WHERE origin = 'catchup') c
WHERE k.source = c.source AND k.event_id = c.event_id AND NOT k.caught_up;
