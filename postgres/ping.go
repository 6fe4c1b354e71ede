package postgres

import "context"

// Ping checks that the database answers, for readiness checks.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}
