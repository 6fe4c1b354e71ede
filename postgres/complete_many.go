package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// EventCompleteMany completes every lease that still holds in one statement
// (one round trip, one commit): the leases and their responses go as
// arrays, and the
// statement returns the ones it found lost. See ferry.Store.
func (s *Store) EventCompleteMany(ctx context.Context, params *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event complete many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(params.Leases))
	attempts := make([]int32, len(params.Leases))
	statuses := make([]int32, len(params.Leases))
	responses := make([]string, len(params.Leases))
	for i, l := range params.Leases {
		ids[i], attempts[i] = l.ID, int32(l.Attempt)
		if len(params.Responses) > 0 {
			statuses[i], responses[i] = int32(params.Responses[i].HTTPStatus), params.Responses[i].Body
		}
	}
	rows, _ := s.pool.Query(ctx, eventCompleteManySQL, pgx.NamedArgs{
		"now":           s.nowArg(),
		"ids":           ids,
		"attempts":      attempts,
		"http_statuses": statuses,
		"responses":     responses,
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
