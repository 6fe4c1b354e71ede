package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// EventCompleteMany completes every lease that still holds in one statement
// (one round trip, one commit): the leases go as two arrays, and the
// statement returns the ones it found lost. See ferry.Store.
func (s *Store) EventCompleteMany(ctx context.Context, params *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event complete many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	ids, attempts := leaseArrays(params.Leases)
	rows, _ := s.pool.Query(ctx, eventCompleteManySQL, pgx.NamedArgs{
		"now":      s.nowArg(),
		"ids":      ids,
		"attempts": attempts,
	})
	lost, err := pgx.CollectRows(rows, scanLease)
	if err != nil {
		return nil, wrap("event complete many", err)
	}
	if len(lost) == 0 {
		return nil, nil
	}
	return lost, nil
}
