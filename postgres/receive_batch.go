package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/groupcommit"
)

// Group commit of receipts. Concurrent EventReceive calls queue; whoever
// finds a free slot sends every queued receipt as one pipelined batch (one
// round trip) that PostgreSQL runs as one implicit transaction: one commit,
// one WAL flush, for all of them. Each caller gets its own outcome only once
// that commit succeeded. An idle store sends each receipt at once, alone.

// defaultReceiveBatch is Config.ReceiveBatch's default.
const defaultReceiveBatch = 64

// receiveArgs is one queued receipt, ready to bind.
type receiveArgs struct {
	source, eventID string
	args            pgx.NamedArgs
}

func (s *Store) newReceiveCommitter(batch, concurrent int) {
	s.receipts = &groupcommit.Committer[*receiveArgs, *ferry.EventReceiveResult]{
		MaxBatch:      batch,
		MaxConcurrent: concurrent,
		Run:           s.receiveBatch,
	}
}

// receiveBatch stores receipts in one transaction. A statement error (a
// value PostgreSQL refuses) aborts the whole batch before anything commits;
// then each receipt is retried alone, so that one bad delivery cannot fail
// its neighbours. Any other error (the connection, the commit) fails every
// receipt of the batch: none of them is acknowledged.
func (s *Store) receiveBatch(ctx context.Context, reqs []*receiveArgs) []groupcommit.Result[*ferry.EventReceiveResult] {
	out := make([]groupcommit.Result[*ferry.EventReceiveResult], len(reqs))
	if len(reqs) == 1 {
		out[0].Value, out[0].Err = s.receiveOne(ctx, reqs[0])
		return out
	}

	// One lock order for every batch, so that two batches sharing keys wait
	// on each other instead of deadlocking. The sort is stable: deliveries
	// of one key keep their arrival order.
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(reqs[a].source, reqs[b].source), cmp.Compare(reqs[a].eventID, reqs[b].eventID))
	})

	batch := &pgx.Batch{}
	for _, i := range order {
		batch.Queue(eventReceiveSQL, reqs[i].args)
	}
	// A batch outside a transaction runs as one implicit transaction: it
	// commits when the last statement has run, and Close reports the commit.
	results := s.pool.SendBatch(ctx, batch)
	var err error
	for _, i := range order {
		if err = scanReceive(results.QueryRow(), &out[i]); err != nil {
			break
		}
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return out
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !pgconn.SafeToRetry(err) && ctx.Err() == nil {
		// The server refused a statement: the transaction rolled back
		// whole. Retry each receipt in its own.
		for i, r := range reqs {
			out[i].Value, out[i].Err = s.receiveOne(ctx, r)
		}
		return out
	}
	err = fmt.Errorf("postgres: event receive: %w", err)
	for i := range out {
		out[i] = groupcommit.Result[*ferry.EventReceiveResult]{Err: err}
	}
	return out
}

// receiveOne stores one receipt in its own (implicit) transaction.
func (s *Store) receiveOne(ctx context.Context, r *receiveArgs) (*ferry.EventReceiveResult, error) {
	var res groupcommit.Result[*ferry.EventReceiveResult]
	if err := scanReceive(s.pool.QueryRow(ctx, eventReceiveSQL, r.args), &res); err != nil {
		return nil, fmt.Errorf("postgres: event receive: %w", err)
	}
	return res.Value, nil
}

func scanReceive(row pgx.Row, out *groupcommit.Result[*ferry.EventReceiveResult]) error {
	var (
		result                ferry.EventReceiveResult
		inserted, conflicting bool
	)
	if err := row.Scan(&result.ID, &inserted, &conflicting); err != nil {
		return err
	}
	switch {
	case inserted:
		result.Outcome = ferry.ReceiveNew
	case conflicting:
		result.Outcome = ferry.ReceiveConflict
	default:
		result.Outcome = ferry.ReceiveDuplicate
	}
	out.Value = &result
	return nil
}
