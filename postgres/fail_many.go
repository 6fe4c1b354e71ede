package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// EventFailMany closes every failure whose lease still holds in one
// statement (one round trip, one commit): each field goes as an array, and
// the statement returns the leases it closed with their new state. See
// ferry.Store.
func (s *Store) EventFailMany(ctx context.Context, params *ferry.EventFailManyParams) ([]ferry.State, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event fail many", err)
	}
	n := len(params.Failures)
	if n == 0 {
		return nil, nil
	}
	var (
		ids         = make([]int64, n)
		attempts    = make([]int32, n)
		errs        = make([]string, n)
		delays      = make([]int64, n)
		maxAttempts = make([]int32, n)
		maxAges     = make([]int64, n)
		dead        = make([]bool, n)
		statuses    = make([]int32, n)
		responses   = make([]string, n)
	)
	for i, f := range params.Failures {
		ids[i], attempts[i] = f.Lease.ID, int32(f.Lease.Attempt)
		errs[i], delays[i] = f.Error, micros(f.RetryDelay)
		maxAttempts[i], maxAges[i], dead[i] = int32(f.MaxAttempts), micros(f.MaxAge), f.Dead
		statuses[i], responses[i] = int32(f.Response.HTTPStatus), f.Response.Body
	}
	rows, _ := s.pool.Query(ctx, eventFailManySQL, pgx.NamedArgs{
		"now":             s.nowArg(),
		"ids":             ids,
		"attempts":        attempts,
		"errors":          errs,
		"retry_delays_us": delays,
		"max_attempts":    maxAttempts,
		"max_ages_us":     maxAges,
		"dead":            dead,
		"http_statuses":   statuses,
		"responses":       responses,
	})
	closed := make(map[ferry.Lease]ferry.State, n)
	var (
		l     ferry.Lease
		state string
	)
	_, err := pgx.ForEachRow(rows, []any{&l.ID, &l.Attempt, &state}, func() error {
		closed[l] = ferry.State(state)
		return nil
	})
	if err != nil {
		return nil, wrap("event fail many", err)
	}
	out := make([]ferry.State, n)
	for i, f := range params.Failures {
		out[i] = closed[f.Lease]
	}
	return out, nil
}
