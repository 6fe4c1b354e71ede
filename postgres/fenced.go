package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// EventHeartbeat extends a held lease to TTL from now. See ferry.Store.
func (s *Store) EventHeartbeat(ctx context.Context, params *ferry.EventHeartbeatParams) (time.Time, error) {
	if err := params.Validate(); err != nil {
		return time.Time{}, wrap("event heartbeat", err)
	}
	var expires time.Time
	err := s.pool.QueryRow(ctx, eventHeartbeatSQL, pgx.NamedArgs{
		"now":     s.nowArg(),
		"id":      params.Lease.ID,
		"attempt": params.Lease.Attempt,
		"ttl_us":  micros(params.TTL),
	}).Scan(&expires)
	if err != nil {
		return time.Time{}, fenceError("event heartbeat", err)
	}
	return expires.UTC(), nil
}

// EventHeartbeatMany extends every lease that still holds in one statement
// (one round trip per tick, however many leases): the leases go as two
// arrays, and the statement returns the ones it found lost. See ferry.Store.
func (s *Store) EventHeartbeatMany(ctx context.Context, params *ferry.EventHeartbeatManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event heartbeat many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	ids, attempts := leaseArrays(params.Leases)
	lost, err := queryLost(ctx, s.pool, eventHeartbeatManySQL, pgx.NamedArgs{
		"now":      s.nowArg(),
		"ids":      ids,
		"attempts": attempts,
		"ttl_us":   micros(params.TTL),
	})
	return lost, wrap("event heartbeat many", err)
}

// EventComplete completes one lease: see ferry.Store.
func (s *Store) EventComplete(ctx context.Context, params *ferry.EventCompleteParams) error {
	return s.complete(ctx, s.pool, params)
}

// EventCompleteTx completes the event inside tx, so the handler's writes in
// tx and the fenced done commit or roll back together. On ErrLeaseLost the
// caller must roll tx back. A tx already committed or rolled back
// (pgx.ErrTxClosed) is ferry.ErrTxDone.
func (s *Store) EventCompleteTx(ctx context.Context, tx pgx.Tx, params *ferry.EventCompleteParams) error {
	return s.complete(ctx, tx, params)
}

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

// complete is a batch of one, so one statement holds the completion rule.
func (s *Store) complete(ctx context.Context, q querier, params *ferry.EventCompleteParams) error {
	if err := params.Validate(); err != nil {
		return wrap("event complete", err)
	}
	lost, err := s.completeMany(ctx, q, &ferry.EventCompleteManyParams{
		Leases:    []ferry.Lease{params.Lease},
		Responses: []ferry.AttemptResponse{params.Response},
	})
	switch {
	case err == nil && len(lost) > 0:
		err = ferry.ErrLeaseLost
	case errors.Is(err, pgx.ErrTxClosed): // EventCompleteTx's
		err = fmt.Errorf("%w: %w", ferry.ErrTxDone, err)
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

// EventFail is a batch of one, so one statement, event_fail_many.sql,
// holds the failure rule. See ferry.Store.
func (s *Store) EventFail(ctx context.Context, params *ferry.EventFailParams) (ferry.State, error) {
	if err := params.Validate(); err != nil {
		return "", wrap("event fail", err)
	}
	states, err := s.failMany(ctx, []ferry.EventFailParams{*params})
	if err == nil && states[0] == "" {
		err = ferry.ErrLeaseLost
	}
	if err != nil {
		return "", wrap("event fail", err)
	}
	return states[0], nil
}

// EventFailMany closes every failure whose lease still holds in one
// statement (one round trip, one commit): each field goes as an array, and
// the statement returns the leases it closed with their new state. See
// ferry.Store.
func (s *Store) EventFailMany(ctx context.Context, params *ferry.EventFailManyParams) ([]ferry.State, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event fail many", err)
	}
	states, err := s.failMany(ctx, params.Failures)
	return states, wrap("event fail many", err)
}

// failMany closes failures, validated, and returns each one's new state:
// empty where its lease was lost.
func (s *Store) failMany(ctx context.Context, failures []ferry.EventFailParams) ([]ferry.State, error) {
	n := len(failures)
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
		notRun      = make([]bool, n)
		statuses    = make([]int32, n)
		responses   = make([]string, n)
	)
	for i, f := range failures {
		ids[i], attempts[i] = f.Lease.ID, int32(f.Lease.Attempt)
		errs[i], delays[i] = f.Error, micros(f.RetryDelay)
		maxAttempts[i], maxAges[i], dead[i], notRun[i] = int32(f.MaxAttempts), micros(f.MaxAge), f.Dead, f.NotRun
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
		"not_run":         notRun,
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
		return nil, err
	}
	out := make([]ferry.State, n)
	for i, f := range failures {
		out[i] = closed[f.Lease]
	}
	return out, nil
}

// EventRelease gives a leased event back, pending and due now. See
// ferry.Store.
func (s *Store) EventRelease(ctx context.Context, params *ferry.EventReleaseParams) error {
	if err := params.Validate(); err != nil {
		return wrap("event release", err)
	}
	var id int64
	err := s.pool.QueryRow(ctx, eventReleaseSQL, leaseArgs(s, params.Lease)).Scan(&id)
	return fenceError("event release", err)
}

// leaseArgs are the arguments of the fence every write after a claim shares.
func leaseArgs(s *Store, lease ferry.Lease) pgx.NamedArgs {
	return pgx.NamedArgs{"now": s.nowArg(), "id": lease.ID, "attempt": lease.Attempt}
}

// fenceError maps "no row matched the fence" to ferry.ErrLeaseLost.
func fenceError(op string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		err = ferry.ErrLeaseLost
	}
	return wrap(op, err)
}

// leaseArrays splits leases into the id and attempt arrays a statement
// unnests.
func leaseArrays(leases []ferry.Lease) (ids []int64, attempts []int32) {
	ids = make([]int64, len(leases))
	attempts = make([]int32, len(leases))
	for i, l := range leases {
		ids[i], attempts[i] = l.ID, int32(l.Attempt)
	}
	return ids, attempts
}

// queryLost runs a fenced batch statement that returns the leases it found
// lost, and returns them; nil when every lease held.
func queryLost(ctx context.Context, q querier, sql string, args pgx.NamedArgs) ([]ferry.Lease, error) {
	rows, _ := q.Query(ctx, sql, args)
	lost, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ferry.Lease, error) {
		var l ferry.Lease
		err := row.Scan(&l.ID, &l.Attempt)
		return l, err
	})
	if err != nil || len(lost) == 0 {
		return nil, err
	}
	return lost, nil
}
