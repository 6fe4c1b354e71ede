SELECT version FROM ferry_migration
