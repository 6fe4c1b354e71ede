-- Ping runs this in a write transaction it rolls back: a write SQLite
-- refuses (SQLITE_READONLY) on a file this process cannot write, where
-- BEGIN IMMEDIATE alone quietly becomes a read. It commits nothing and
-- names no table of Ferry's, so it works before Migrate too.
CREATE TABLE ferry_ping (x)
