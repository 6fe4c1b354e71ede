SELECT ferry_archive_create(@from_day::date, @to_day::date, coalesce(@now::timestamptz, statement_timestamp()));
