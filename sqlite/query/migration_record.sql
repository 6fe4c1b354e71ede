INSERT INTO ferry_migration (version, name, applied_at)
VALUES (:version, :name, :now)
