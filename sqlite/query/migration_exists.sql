SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ferry_migration'
