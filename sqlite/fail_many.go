package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/ferry-inbox/ferry"
)

// EventFailMany closes every failure whose lease still holds in one write
// transaction (one fsync) of two statements, whatever the number of
// failures: a fenced update of the events that returns their new states,
// then their ledger rows. See ferry.Store.
func (s *Store) EventFailMany(ctx context.Context, params *ferry.EventFailManyParams) ([]ferry.State, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event fail many", err)
	}
	if len(params.Failures) == 0 {
		return nil, nil
	}
	byLease := make(map[ferry.Lease]*ferry.EventFailParams, len(params.Failures))
	failures := make([][7]any, len(params.Failures))
	for i, f := range params.Failures {
		dead := 0
		if f.Dead {
			dead = 1
		}
		failures[i] = [7]any{f.Lease.ID, f.Lease.Attempt, f.Error, f.RetryDelay.Microseconds(),
			f.MaxAttempts, f.MaxAge.Microseconds(), dead}
		byLease[f.Lease] = &params.Failures[i]
	}
	closed := make(map[ferry.Lease]ferry.State, len(params.Failures))
	err := s.writeTx(ctx, "event fail many", func(tx *sql.Tx) error {
		now := s.nowMicros()
		rows, err := tx.QueryContext(ctx, eventFailManySQL, sql.Named("now", now), sql.Named("failures", jsonArg(failures)))
		if err != nil {
			return err
		}
		defer rows.Close()
		var ledger [][6]any
		for rows.Next() {
			var (
				l     ferry.Lease
				state ferry.State
			)
			if err := rows.Scan(&l.ID, &l.Attempt, &state); err != nil {
				return err
			}
			closed[l] = state
			outcome := ferry.OutcomeFailed
			if state == ferry.StateDead {
				outcome = ferry.OutcomeDead
			}
			f := byLease[l]
			ledger = append(ledger, [6]any{l.ID, l.Attempt, string(outcome), f.Error, f.Response.HTTPStatus, f.Response.Body})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ledger) == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, eventFailManyAttemptSQL, sql.Named("now", now), sql.Named("closed", jsonArg(ledger)))
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]ferry.State, len(params.Failures))
	pending := false
	for i, f := range params.Failures {
		out[i] = closed[f.Lease]
		pending = pending || out[i] == ferry.StatePending
	}
	if pending {
		s.broadcast()
	}
	return out, nil
}

// jsonArg encodes v, made of numbers and strings only, for json_each.
func jsonArg(v any) string {
	b, _ := json.Marshal(v) // numbers and strings cannot fail
	return string(b)
}
