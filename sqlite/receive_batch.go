package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/groupcommit"
)

// Group commit of receipts. SQLite has one writer and, at synchronous=FULL,
// one fsync per commit: receipts that queue while a write transaction runs
// go into the next one together, and each caller returns only after that
// transaction committed. An idle store commits each receipt at once, alone.

// defaultReceiveBatch is Config.ReceiveBatch's default.
const defaultReceiveBatch = 64

func (s *Store) newReceiveCommitter(batch int) {
	s.receipts = &groupcommit.Committer[[]any, *ferry.EventReceiveResult]{
		MaxBatch:      batch,
		MaxConcurrent: 1, // one writer connection
		Run:           s.receiveBatch,
	}
}

// receiveBatch stores receipts (their named arguments) in one write
// transaction. If a statement fails, the transaction is rolled back whole
// and each receipt is retried in its own, so that one bad delivery cannot
// fail its neighbours. A failed begin or commit fails them all: none is
// acknowledged.
func (s *Store) receiveBatch(ctx context.Context, reqs [][]any) []groupcommit.Result[*ferry.EventReceiveResult] {
	out := make([]groupcommit.Result[*ferry.EventReceiveResult], len(reqs))
	statementFailed := false
	err := s.writeTx(ctx, "receive", func(tx *sql.Tx) error {
		for i, args := range reqs {
			res, err := receiveInTx(ctx, tx, args)
			if err != nil {
				statementFailed = true
				return err
			}
			out[i].Value = res
		}
		return nil
	})
	switch {
	case err == nil:
	case statementFailed && len(reqs) > 1 && ctx.Err() == nil:
		for i, args := range reqs {
			var res *ferry.EventReceiveResult
			err := s.writeTx(ctx, "receive", func(tx *sql.Tx) error {
				var err error
				res, err = receiveInTx(ctx, tx, args)
				return err
			})
			out[i] = groupcommit.Result[*ferry.EventReceiveResult]{Value: res, Err: err}
		}
	default:
		for i := range out {
			out[i] = groupcommit.Result[*ferry.EventReceiveResult]{Err: err}
		}
		return out
	}
	for _, r := range out {
		if r.Err == nil && r.Value.Outcome == ferry.ReceiveNew {
			s.broadcast()
			break
		}
	}
	return out
}

// receiveInTx stores one delivery inside tx: a new key is inserted; a known
// one counts the delivery, and keeps it as a conflict if its payload differs.
func receiveInTx(ctx context.Context, tx *sql.Tx, args []any) (*ferry.EventReceiveResult, error) {
	result := &ferry.EventReceiveResult{}
	err := tx.QueryRowContext(ctx, eventReceiveInsertSQL, args...).Scan(&result.ID)
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
	if _, err := tx.ExecContext(ctx, conflictInsertSQL, append(args[:len(args):len(args)], sql.Named("id", result.ID))...); err != nil {
		return nil, fmt.Errorf("conflict: %w", err)
	}
	return result, nil
}
