package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ferry-inbox/ferry"
)

// EventHeartbeat extends a held lease to TTL from now.
func (s *Store) EventHeartbeat(ctx context.Context, params *ferry.EventHeartbeatParams) (time.Time, error) {
	if err := params.Validate(); err != nil {
		return time.Time{}, wrap("event heartbeat", err)
	}
	var expires sql.NullInt64
	err := s.writeTx(ctx, "event heartbeat", func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, eventHeartbeatSQL, append(fenceArgs(params.Lease, s.nowTime()),
			sql.Named("ttl_us", params.TTL.Microseconds()))...).Scan(&expires)
		if errors.Is(err, sql.ErrNoRows) {
			return ferry.ErrLeaseLost
		}
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return fromMicros(expires), nil
}

// EventHeartbeatMany extends every lease that still holds in one statement
// of one write transaction, whatever the number of leases. See ferry.Store.
func (s *Store) EventHeartbeatMany(ctx context.Context, params *ferry.EventHeartbeatManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event heartbeat many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	var extended []ferry.Lease
	err := s.writeTx(ctx, "event heartbeat many", func(tx *sql.Tx) (err error) {
		extended, err = collectRows(ctx, tx, eventHeartbeatManySQL, scanLease, sql.Named("now", s.nowMicros()),
			sql.Named("ttl_us", params.TTL.Microseconds()), sql.Named("leases", leasePairs(params.Leases)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return lostOf(params.Leases, extended), nil
}

// EventComplete marks the leased event done.
func (s *Store) EventComplete(ctx context.Context, params *ferry.EventCompleteParams) error {
	if err := params.Validate(); err != nil {
		return wrap("event complete", err)
	}
	return s.writeTx(ctx, "event complete", func(tx *sql.Tx) error {
		return s.complete(ctx, tx, params)
	})
}

// EventCompleteTx marks the leased event done inside tx, which must come
// from InTx or DB (a write transaction). On ErrLeaseLost nothing was
// changed and the caller must roll tx back. A tx already committed or
// rolled back (sql.ErrTxDone) is ferry.ErrTxDone.
func (s *Store) EventCompleteTx(ctx context.Context, tx *sql.Tx, params *ferry.EventCompleteParams) error {
	if err := params.Validate(); err != nil {
		return wrap("event complete", err)
	}
	err := liveTx(ctx, tx)
	if err == nil {
		err = s.complete(ctx, tx, params)
	}
	if errors.Is(err, sql.ErrTxDone) {
		err = fmt.Errorf("%w: %w", ferry.ErrTxDone, err)
	}
	return wrap("event complete", err)
}

// liveTx returns ErrTxDone if tx's connection has left its transaction.
// On a full disk or an I/O error SQLite may roll the whole transaction back,
// not just the statement that failed, and database/sql is not told: each
// later statement of tx commits on its own, and a completion would mark the
// event done beside writes that are gone. A BEGIN fails only inside a
// transaction, so one that succeeds is undone at once.
func liveTx(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "BEGIN")
	if err != nil {
		var e *msqlite.Error
		if errors.As(err, &e) && e.Code() == sqlite3.SQLITE_ERROR && strings.Contains(e.Error(), "within a transaction") {
			return nil
		}
		return err
	}
	// The verdict stands whatever ctx does now; the BEGIN must not stay.
	_, err = tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	return errors.Join(fmt.Errorf("%w: SQLite rolled the transaction back after a statement in it failed", ferry.ErrTxDone), err)
}

// EventCompleteMany completes every lease that still holds in one write
// transaction (one fsync) of two statements, whatever the number of leases:
// a fenced update of the events that returns the ones it completed, then
// their ledger rows. The clock is read under the write lock. See
// ferry.Store.
func (s *Store) EventCompleteMany(ctx context.Context, params *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event complete many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	var lost []ferry.Lease
	err := s.writeTx(ctx, "event complete many", func(tx *sql.Tx) (err error) {
		lost, err = s.completeMany(ctx, tx, params)
		return err
	})
	if err != nil {
		return nil, err
	}
	return lost, nil
}

// complete is a batch of one, so one pair of statements holds the
// completion rule.
func (s *Store) complete(ctx context.Context, tx *sql.Tx, params *ferry.EventCompleteParams) error {
	lost, err := s.completeMany(ctx, tx, &ferry.EventCompleteManyParams{
		Leases:    []ferry.Lease{params.Lease},
		Responses: []ferry.AttemptResponse{params.Response},
	})
	if err == nil && len(lost) > 0 {
		err = ferry.ErrLeaseLost
	}
	return err
}

// completeMany completes in tx the leases of params that hold and returns
// the others, each once, in the order first named.
func (s *Store) completeMany(ctx context.Context, tx *sql.Tx, params *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	now := s.nowMicros()
	done, err := collectRows(ctx, tx, eventCompleteManySQL, scanLease, sql.Named("now", now), sql.Named("leases", leasePairs(params.Leases)))
	if err != nil {
		return nil, err
	}
	if len(done) > 0 {
		if _, err := tx.ExecContext(ctx, eventCompleteManyAttemptSQL, sql.Named("now", now),
			sql.Named("outcome", string(ferry.OutcomeDone)), sql.Named("leases", ledgerRows(done, params))); err != nil {
			return nil, err
		}
	}
	return lostOf(params.Leases, done), nil
}

// EventFail is a batch of one, so one statement, event_fail_many.sql,
// holds the failure rule.
func (s *Store) EventFail(ctx context.Context, params *ferry.EventFailParams) (ferry.State, error) {
	if err := params.Validate(); err != nil {
		return "", wrap("event fail", err)
	}
	states, err := s.failMany(ctx, "event fail", []ferry.EventFailParams{*params})
	switch {
	case err != nil:
		return "", err
	case states[0] == "":
		return "", wrap("event fail", ferry.ErrLeaseLost)
	}
	return states[0], nil
}

// EventFailMany closes every failure whose lease still holds in one write
// transaction (one fsync) of two statements, whatever the number of
// failures: a fenced update of the events that returns their new states,
// then their ledger rows. See ferry.Store.
func (s *Store) EventFailMany(ctx context.Context, params *ferry.EventFailManyParams) ([]ferry.State, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event fail many", err)
	}
	return s.failMany(ctx, "event fail many", params.Failures)
}

// failMany closes failures, validated, in op's write transaction, and
// returns each one's new state: empty where its lease was lost.
func (s *Store) failMany(ctx context.Context, op string, failures []ferry.EventFailParams) ([]ferry.State, error) {
	if len(failures) == 0 {
		return nil, nil
	}
	byLease := make(map[ferry.Lease]*ferry.EventFailParams, len(failures))
	rows := make([][7]any, len(failures))
	for i, f := range failures {
		dead := 0
		if f.Dead {
			dead = 1
		}
		rows[i] = [7]any{f.Lease.ID, f.Lease.Attempt, f.Error, f.RetryDelay.Microseconds(),
			f.MaxAttempts, f.MaxAge.Microseconds(), dead}
		byLease[f.Lease] = &failures[i]
	}
	closed := make(map[ferry.Lease]ferry.State, len(failures))
	err := s.writeTx(ctx, op, func(tx *sql.Tx) error {
		now := s.nowMicros()
		ledger, err := collectRows(ctx, tx, eventFailManySQL, func(row scanner) ([7]any, error) {
			var (
				l     ferry.Lease
				state ferry.State
			)
			if err := row.Scan(&l.ID, &l.Attempt, &state); err != nil {
				return [7]any{}, err
			}
			closed[l] = state
			f := byLease[l]
			return [7]any{l.ID, l.Attempt, state, f.NotRun, f.Error, f.Response.HTTPStatus, f.Response.Body}, nil
		}, sql.Named("now", now), sql.Named("failures", jsonArg(rows)))
		if err != nil || len(ledger) == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, eventFailManyAttemptSQL, sql.Named("now", now), sql.Named("closed", jsonArg(ledger)))
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]ferry.State, len(failures))
	pending := false
	for i, f := range failures {
		out[i] = closed[f.Lease]
		pending = pending || out[i] == ferry.StatePending
	}
	if pending {
		s.broadcast()
	}
	return out, nil
}

// EventRelease gives a leased event back, pending and due now.
func (s *Store) EventRelease(ctx context.Context, params *ferry.EventReleaseParams) error {
	if err := params.Validate(); err != nil {
		return wrap("event release", err)
	}
	err := s.writeTx(ctx, "event release", func(tx *sql.Tx) error {
		now := s.nowTime()
		if err := execFenced(ctx, tx, eventReleaseSQL, params.Lease, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, attemptReleaseSQL, fenceArgs(params.Lease, now)...)
		return err
	})
	if err != nil {
		return err
	}
	s.broadcast()
	return nil
}

// fenceArgs are the parameters of the lease fence every write after a claim
// carries: this row, this attempt, still in_progress, lease not expired.
func fenceArgs(lease ferry.Lease, now time.Time) []any {
	return []any{
		sql.Named("id", lease.ID),
		sql.Named("attempt", lease.Attempt),
		sql.Named("now", now.UnixMicro()),
	}
}

// execFenced runs a fenced update and returns ferry.ErrLeaseLost if the fence
// matched no row.
func execFenced(ctx context.Context, tx *sql.Tx, query string, lease ferry.Lease, now time.Time, args ...any) error {
	res, err := tx.ExecContext(ctx, query, append(fenceArgs(lease, now), args...)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ferry.ErrLeaseLost
	}
	return nil
}

// scanLease reads a row of (id, attempt): the leases a fenced batch
// statement reports as held.
func scanLease(row scanner) (ferry.Lease, error) {
	var l ferry.Lease
	err := row.Scan(&l.ID, &l.Attempt)
	return l, err
}

// lostOf returns the leases named that are not among held, each once, in
// the order first named; nil when all held.
func lostOf(named, held []ferry.Lease) []ferry.Lease {
	holds := make(map[ferry.Lease]bool, len(held))
	for _, l := range held {
		holds[l] = true
	}
	var lost []ferry.Lease
	for _, l := range named {
		if !holds[l] {
			lost = append(lost, l)
			holds[l] = true // named again later: listed once
		}
	}
	return lost
}

// leasePairs encodes leases as a JSON array of [id, attempt] pairs for
// json_each.
func leasePairs(leases []ferry.Lease) string {
	pairs := make([][2]int64, len(leases))
	for i, l := range leases {
		pairs[i] = [2]int64{l.ID, int64(l.Attempt)}
	}
	return jsonArg(pairs)
}

// ledgerRows encodes the completed leases with what their downstream
// answered (the first naming's) as a JSON array of [id, attempt,
// http_status, response] for json_each.
func ledgerRows(done []ferry.Lease, params *ferry.EventCompleteManyParams) string {
	responses := make(map[ferry.Lease]ferry.AttemptResponse, len(params.Responses))
	for i, r := range params.Responses {
		if _, seen := responses[params.Leases[i]]; !seen {
			responses[params.Leases[i]] = r
		}
	}
	rows := make([][4]any, len(done))
	for i, l := range done {
		r := responses[l]
		rows[i] = [4]any{l.ID, l.Attempt, r.HTTPStatus, r.Body}
	}
	return jsonArg(rows)
}

// jsonArg encodes v, made of numbers and strings only, for json_each.
func jsonArg(v any) string {
	b, _ := json.Marshal(v) // numbers and strings cannot fail
	return string(b)
}
