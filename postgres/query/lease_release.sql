DELETE FROM ferry_lease WHERE name = @name::text AND owner = @owner::text;
