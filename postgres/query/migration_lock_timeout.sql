-- Bounds each lock wait of the rest of the migration transaction (SET
-- LOCAL: it ends with the transaction), so a DDL statement waiting for a
-- table lock never queues that table's traffic behind it for long.
SELECT set_config('lock_timeout', @timeout_ms::bigint || 'ms', true);
