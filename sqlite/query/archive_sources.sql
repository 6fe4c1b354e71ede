-- The sources that have events, one index probe each (a loose scan of
-- ferry_event_source_id), so maintenance never reads the table through.
WITH RECURSIVE src(source) AS (
    SELECT min(source) FROM ferry_event
    UNION ALL
    SELECT (SELECT min(source) FROM ferry_event WHERE source > src.source)
    FROM src
    WHERE src.source IS NOT NULL
)
SELECT source FROM src WHERE source IS NOT NULL
