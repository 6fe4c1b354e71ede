DELETE FROM ferry_event
WHERE source = :source
  AND state = 'done'
  AND completed_at <= :cutoff
