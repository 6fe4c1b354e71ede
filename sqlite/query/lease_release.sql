DELETE FROM ferry_lease WHERE name = :name AND owner = :owner
