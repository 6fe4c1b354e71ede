INSERT INTO ferry_migration (version, name) VALUES (@version::int, @name::text);
