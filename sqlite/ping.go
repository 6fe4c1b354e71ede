package sqlite

import "context"

// Ping checks that the database file answers a query, for readiness checks.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.readDB.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}
