package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// EventCompleteMany completes every lease that still holds in one statement
// (one round trip, one commit): the leases and their responses go as
// arrays, and the statement returns the ones it found lost. See
// ferry.Store.
func (s *Store) EventCompleteMany(ctx context.Context, params *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event complete many", err)
	}
	lost, err := s.completeMany(ctx, s.pool, params)
	return lost, wrap("event complete many", err)
}

// EventComplete completes one lease: see ferry.Store.
func (s *Store) EventComplete(ctx context.Context, params *ferry.EventCompleteParams) error {
	return s.complete(ctx, s.pool, params)
}

// EventCompleteTx completes the event inside tx, so the handler's writes in
// tx and the fenced done commit or roll back together. On ErrLeaseLost the
// caller must roll tx back.
func (s *Store) EventCompleteTx(ctx context.Context, tx pgx.Tx, params *ferry.EventCompleteParams) error {
	return s.complete(ctx, tx, params)
}

// complete is a batch of one, so one statement holds the completion rule.
func (s *Store) complete(ctx context.Context, q querier, params *ferry.EventCompleteParams) error {
	if err := params.Validate(); err != nil {
		return wrap("event complete", err)
	}
	lost, err := s.completeMany(ctx, q, &ferry.EventCompleteManyParams{
		Leases:    []ferry.Lease{params.Lease},
		Responses: []ferry.AttemptResponse{params.Response},
	})
	if err == nil && len(lost) > 0 {
		err = ferry.ErrLeaseLost
	}
	return wrap("event complete", err)
}

func (s *Store) completeMany(ctx context.Context, q querier, params *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	if len(params.Leases) == 0 {
		return nil, nil
	}
	ids, attempts := leaseArrays(params.Leases)
	statuses := make([]int32, len(params.Leases))
	responses := make([]string, len(params.Leases))
	for i, r := range params.Responses {
		statuses[i], responses[i] = int32(r.HTTPStatus), r.Body
	}
	return queryLost(ctx, q, eventCompleteManySQL, pgx.NamedArgs{
		"now":           s.nowArg(),
		"ids":           ids,
		"attempts":      attempts,
		"http_statuses": statuses,
		"responses":     responses,
	})
}
