SELECT version FROM ferry_migration ORDER BY version;
