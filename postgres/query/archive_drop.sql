SELECT ferry_archive_drop(@name::text);
