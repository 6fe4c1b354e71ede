-- Sets the named checkpoint, stamped with the store's now. With :lease
-- set, only while :owner holds that lease unexpired (the same clock): no
-- row comes back otherwise, and nothing changes.
INSERT INTO ferry_checkpoint (name, value, updated_at)
SELECT :name, :value, :now
WHERE :lease = ''
   OR EXISTS (SELECT 1 FROM ferry_lease l
              WHERE l.name = :lease AND l.owner = :owner AND l.expires_at > :now)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
RETURNING 1
