package postgres

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/groupcommit"
)

// Group commit of receipts. Concurrent EventReceive calls queue; whoever
// finds a free slot writes every queued receipt with one statement
// (event_receive_batch.sql) that commits on its own: one round trip, one
// parse and plan, one commit and WAL flush for all of them. Each caller gets
// its own outcome only once that commit succeeded. An idle store writes each
// receipt at once, alone.

// defaultReceiveBatch is Config.ReceiveBatch's default.
const (
	defaultReceiveBatch       = 64
	defaultReceiveConcurrency = 2
)

//go:embed query/event_receive_batch.sql
var eventReceiveBatchSQL string

// receiveArgs is one queued receipt.
type receiveArgs struct {
	source, eventID, typ string
	origin               string
	payload              []byte     // never nil: the column is NOT NULL
	headers              []byte     // JSON, nil (NULL) when there are none
	sum                  [32]byte   // payload's SHA-256
	now                  *time.Time // Config.Now's time, nil for the database's
}

// namedArgs binds r to event_receive.sql.
func (r *receiveArgs) namedArgs() pgx.NamedArgs {
	var now any
	if r.now != nil {
		now = *r.now
	}
	return pgx.NamedArgs{
		"now":            now,
		"source":         r.source,
		"event_id":       r.eventID,
		"type":           r.typ,
		"payload":        r.payload,
		"headers":        r.headers,
		"payload_sha256": r.sum[:],
		"origin":         r.originArg(),
	}
}

func (s *Store) newReceiveCommitter(batch, concurrent int) {
	s.receipts = &groupcommit.Committer[*receiveArgs, *ferry.EventReceiveResult]{
		MaxBatch:      batch,
		MaxConcurrent: concurrent,
		Run:           s.receiveBatch,
	}
}

// receiveBatch stores receipts in one statement, hence one transaction. A
// statement error (a value PostgreSQL refuses) rolls the whole batch back;
// then each receipt is retried alone, so that one bad delivery cannot fail
// its neighbours. Any other error (the connection, the commit) fails every
// receipt of the batch: none of them is acknowledged.
func (s *Store) receiveBatch(ctx context.Context, reqs []*receiveArgs) []groupcommit.Result[*ferry.EventReceiveResult] {
	out := make([]groupcommit.Result[*ferry.EventReceiveResult], len(reqs))
	if len(reqs) == 1 {
		out[0].Value, out[0].Err = s.receiveOne(ctx, reqs[0])
		return out
	}
	err := s.receiveMany(ctx, reqs, out)
	if err == nil {
		return out
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !pgconn.SafeToRetry(err) && ctx.Err() == nil {
		// The server refused the statement: nothing of it committed.
		// Retry each receipt in its own transaction.
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

// receiveMany runs reqs (at least two) as one statement and fills out with
// the outcome each would have had, run one after the other in arrival order.
func (s *Store) receiveMany(ctx context.Context, reqs []*receiveArgs, out []groupcommit.Result[*ferry.EventReceiveResult]) error {
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

	n := len(reqs)
	var (
		sources, eventIDs, types = make([]string, n), make([]string, n), make([]string, n)
		payloads, sums           = make([][]byte, n), make([][]byte, n)
		headers                  = make([][]byte, n)
		origins                  = make([]string, n)
		isFirst                  = make([]bool, n)
		counts, firstConflicts   = make([]int32, n), make([]int32, n)
		now                      *time.Time
		firsts                   []int // position in order of each key's first delivery
	)
	for pos, i := range order {
		r := reqs[i]
		sources[pos], eventIDs[pos], types[pos] = r.source, r.eventID, r.typ
		payloads[pos], sums[pos], headers[pos] = r.payload, r.sum[:], r.headers
		origins[pos] = r.originArg()
		if r.now != nil && (now == nil || r.now.After(*now)) {
			now = r.now // a test clock: the latest caller's time
		}
		if f := len(firsts) - 1; f >= 0 && sameKey(reqs[order[firsts[f]]], r) {
			counts[firsts[f]]++
			if r.sum != reqs[order[firsts[f]]].sum {
				firstConflicts[firsts[f]]++
			}
			continue
		}
		isFirst[pos], counts[pos] = true, 1
		firsts = append(firsts, pos)
	}
	var nowArg any
	if now != nil {
		nowArg = *now
	}

	rows, _ := s.pool.Query(ctx, eventReceiveBatchSQL, pgx.NamedArgs{
		"now":             nowArg,
		"source":          sources,
		"event_id":        eventIDs,
		"type":            types,
		"payload":         payloads,
		"headers":         headers,
		"payload_sha256":  sums,
		"is_first":        isFirst,
		"n":               counts,
		"first_conflicts": firstConflicts,
		"origin":          origins,
	})
	// One row per key, in the order of firsts. Outcomes are only handed out
	// once the rows are closed without error: the statement has committed.
	type keyResult struct {
		id       int64
		inserted bool
		stored   []byte
	}
	keys := make([]keyResult, 0, len(firsts))
	var k keyResult
	_, err := pgx.ForEachRow(rows, []any{&k.id, &k.inserted, &k.stored}, func() error {
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		return err
	}
	if len(keys) != len(firsts) {
		return fmt.Errorf("%d rows for %d keys", len(keys), len(firsts))
	}

	key := -1
	for pos, i := range order {
		if isFirst[pos] {
			key++
		}
		kr := keys[key]
		res := &ferry.EventReceiveResult{ID: kr.id}
		switch {
		case isFirst[pos] && kr.inserted:
			res.Outcome = ferry.ReceiveNew
		case !bytes.Equal(reqs[i].sum[:], kr.stored):
			res.Outcome = ferry.ReceiveConflict
		default:
			res.Outcome = ferry.ReceiveDuplicate
		}
		out[i].Value = res
	}
	return nil
}

// originArg is the origin to store; receipts built without one were
// delivered.
func (r *receiveArgs) originArg() string { return string(ferry.Origin(r.origin).OrDelivery()) }

func sameKey(a, b *receiveArgs) bool { return a.source == b.source && a.eventID == b.eventID }

// receiveOne stores one receipt in its own (implicit) transaction.
func (s *Store) receiveOne(ctx context.Context, r *receiveArgs) (*ferry.EventReceiveResult, error) {
	var res groupcommit.Result[*ferry.EventReceiveResult]
	if err := scanReceive(s.pool.QueryRow(ctx, eventReceiveSQL, r.namedArgs()), &res); err != nil {
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
