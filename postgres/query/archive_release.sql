DELETE FROM ferry_lease WHERE name = 'ferry_archive_maintenance' AND owner = @owner::text;
