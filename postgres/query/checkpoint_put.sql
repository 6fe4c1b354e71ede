INSERT INTO ferry_checkpoint AS c (name, value, updated_at)
VALUES (@name::text, @value::text, coalesce(@now::timestamptz, statement_timestamp()))
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;
