INSERT INTO ferry_checkpoint (name, value, updated_at)
VALUES (:name, :value, :now)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
