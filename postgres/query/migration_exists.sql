SELECT to_regclass('ferry_migration') IS NOT NULL;
