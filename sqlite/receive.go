package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-inbox/ferry"
)

// Receipts. EventReceive stores one delivery in a write transaction;
// EventReceiveMany stores many in one (one fsync for the lot: SQLite has one
// writer and, at synchronous=FULL, one fsync per commit). The receiver
// batches concurrent requests into EventReceiveMany (group commit). Writes
// are serialized, so concurrent deliveries of one key make exactly one row:
// the first is new, the rest are duplicates (or conflicts) and are counted.
// For the same reason replay detection (a new key carrying a stored body,
// see ferry.EventReceiveParams.ReplayWindow) is atomic with the insert it
// prevents: the lookup and the write share one write transaction.

// receiveArgs are the named arguments of one receipt's statements, but for
// its time, which receiveInTx reads under the write lock.
func receiveArgs(params *ferry.EventReceiveParams) ([]any, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	headers, err := marshalHeaders(params.Headers)
	if err != nil {
		return nil, err
	}
	payload := params.Payload
	if payload == nil {
		payload = []byte{} // the column is NOT NULL; nil would bind as NULL
	}
	sum := sha256.Sum256(payload)
	return []any{
		sql.Named("source", params.Source),
		sql.Named("event_id", params.EventID),
		sql.Named("type", params.Type),
		sql.Named("payload", payload),
		sql.Named("headers", headers),
		sql.Named("payload_sha256", sum[:]),
		sql.Named("origin", string(params.Origin.OrDelivery())),
		sql.Named("replay_window_us", params.ReplayWindow.Microseconds()),
		sql.Named("traceparent", params.Traceparent),
		sql.Named("tracestate", params.Tracestate),
		sql.Named("notice_keep", int64(ferry.NoticeKeep)),
	}, nil
}

// EventReceive stores one delivery in its own write transaction.
func (s *Store) EventReceive(ctx context.Context, params *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
	const op = "event receive"
	args, err := receiveArgs(params)
	if err != nil {
		return nil, wrap(op, err)
	}
	var res *ferry.EventReceiveResult
	err = s.writeTx(ctx, op, func(tx *sql.Tx) error {
		res, err = receiveInTx(ctx, tx, args, s.nowMicros())
		return err
	})
	if err != nil {
		return nil, err
	}
	if res.Outcome == ferry.ReceiveNew {
		s.broadcast()
	}
	return res, nil
}

// EventReceiveMany stores the valid receipts in one write transaction. If a
// statement fails, the transaction is rolled back whole and each receipt is
// stored in its own, so that one bad delivery cannot fail its neighbours. A
// failed begin or commit fails the call: none is acknowledged.
func (s *Store) EventReceiveMany(ctx context.Context, params *ferry.EventReceiveManyParams) ([]ferry.EventReceiveManyResult, error) {
	const op = "event receive many"
	out := make([]ferry.EventReceiveManyResult, len(params.Receipts))
	var (
		reqs  [][]any
		index []int // index[j] is the position of reqs[j] in out
	)
	for i, p := range params.Receipts {
		args, err := receiveArgs(p)
		if err != nil {
			out[i].Err = wrap(op, err)
			continue
		}
		reqs, index = append(reqs, args), append(index, i)
	}
	if len(reqs) == 0 {
		return out, nil
	}
	statementFailed := false
	err := s.writeTx(ctx, op, func(tx *sql.Tx) error {
		now := s.nowMicros()
		for j, args := range reqs {
			res, err := receiveInTx(ctx, tx, args, now)
			if err != nil {
				statementFailed = true
				return err
			}
			out[index[j]].Result = res
		}
		return nil
	})
	switch {
	case err == nil:
	case statementFailed && len(reqs) > 1 && ctx.Err() == nil:
		for j, args := range reqs {
			var res *ferry.EventReceiveResult
			err := s.writeTx(ctx, op, func(tx *sql.Tx) error {
				var err error
				res, err = receiveInTx(ctx, tx, args, s.nowMicros())
				return err
			})
			out[index[j]] = ferry.EventReceiveManyResult{Result: res, Err: err}
		}
	default:
		return nil, err
	}
	for _, r := range out {
		if r.Err == nil && r.Result != nil && r.Result.Outcome == ferry.ReceiveNew {
			s.broadcast()
			break
		}
	}
	return out, nil
}

// receiveInTx stores one delivery inside tx at now, the store's time read
// under the write lock: a new key is inserted; a known one counts the
// delivery, and keeps it as a conflict if its payload differs (up to
// ferry.NoticeKeep, each payload once).
func receiveInTx(ctx context.Context, tx *sql.Tx, args []any, now int64) (*ferry.EventReceiveResult, error) {
	args = append(args[:len(args):len(args)], sql.Named("now", now))
	result := &ferry.EventReceiveResult{}
	if replayed, err := receiveReplay(ctx, tx, args); err != nil || replayed != nil {
		return replayed, err
	}
	err := tx.QueryRowContext(ctx, eventReceiveSQL, args...).Scan(&result.ID)
	if err == nil {
		result.Outcome = ferry.ReceiveNew
		return result, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	var conflict bool
	if err := tx.QueryRowContext(ctx, eventReceiveRedeliverSQL, args...).Scan(&result.ID, &conflict); err != nil {
		return nil, err
	}
	if !conflict {
		result.Outcome = ferry.ReceiveDuplicate
		return result, nil
	}
	result.Outcome = ferry.ReceiveConflict
	kept, err := tx.ExecContext(ctx, eventReceiveConflictSQL, append(args[:len(args):len(args)], sql.Named("id", result.ID))...)
	if err == nil {
		result.CountedOnly, err = countedOnly(kept)
	}
	if err != nil {
		return nil, fmt.Errorf("conflict: %w", err)
	}
	return result, nil
}

// receiveReplay counts the delivery as a replay, keeps it (up to
// ferry.NoticeKeep) and returns its result when replay detection is on, its
// key is new and its body is a stored event's of the window; otherwise it
// returns nil and changes nothing.
func receiveReplay(ctx context.Context, tx *sql.Tx, args []any) (*ferry.EventReceiveResult, error) {
	if namedInt(args, "replay_window_us") <= 0 {
		return nil, nil
	}
	var id int64
	err := tx.QueryRowContext(ctx, eventReceiveReplaySQL, args...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	withID := append(args[:len(args):len(args)], sql.Named("id", id))
	if _, err := tx.ExecContext(ctx, eventReceiveReplayCountSQL, withID...); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	kept, err := tx.ExecContext(ctx, eventReceiveReplayRecordSQL, withID...)
	result := &ferry.EventReceiveResult{Outcome: ferry.ReceiveReplay, ID: id}
	if err == nil {
		result.CountedOnly, err = countedOnly(kept)
	}
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return result, nil
}

// countedOnly reports whether the statement that keeps a conflict or a
// replay kept nothing: the notice was only counted.
func countedOnly(res sql.Result) (bool, error) {
	n, err := res.RowsAffected()
	return n == 0, err
}

// namedInt returns the int64 value of the named argument name in args, 0 if
// there is none.
func namedInt(args []any, name string) int64 {
	for _, a := range args {
		if n, ok := a.(sql.NamedArg); ok && n.Name == name {
			v, _ := n.Value.(int64)
			return v
		}
	}
	return 0
}
