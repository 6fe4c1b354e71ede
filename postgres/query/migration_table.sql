CREATE TABLE IF NOT EXISTS ferry_migration (
    version    int         PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
