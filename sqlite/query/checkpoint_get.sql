SELECT name, value, updated_at FROM ferry_checkpoint WHERE name = :name
