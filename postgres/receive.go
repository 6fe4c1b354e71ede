package postgres

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferry-inbox/ferry"
)

// Receipts. EventReceive writes one delivery with one statement
// (event_receive.sql) that commits on its own. EventReceiveMany writes many
// with one statement (event_receive_many.sql): one round trip, one parse and
// plan, one commit and WAL flush for all of them; the receiver batches
// concurrent requests into it (group commit).
//
// A receipt with a ReplayWindow first takes its body's advisory lock
// (event_receive_lock.sql) in the same transaction, one round trip still: a
// pgx batch runs in one implicit transaction. A batch holding any such
// receipt takes all its bodies' locks first, in one order, then stores the
// receipts one statement each, in arrival order, in that transaction (their
// known keys locked first in key order, then their events in id order, as
// other receipts and completions lock them): one commit still, and exactly
// the outcomes of running them one after the other (which copy of a body
// is the original depends on it). Two such batches that share a body run
// one after the other. A key the batch did not know when it locked (stored
// meanwhile by another receipt) is locked in arrival order and may still
// close a cycle, which PostgreSQL breaks by failing one statement; the
// batch's receipts are then stored one by one.

// receiveArgs is one receipt, ready to bind.
type receiveArgs struct {
	source, eventID, typ string
	payload              []byte   // never nil: the column is NOT NULL
	headers              []byte   // JSON, nil (NULL) when there are none
	sum                  [32]byte // payload's SHA-256
	origin               string
	replayWindowUS       int64  // 0: replay detection off
	traceparent          string // "" is stored as NULL
	tracestate           string
}

// lockKey is the advisory lock key of the receipt's (source, body): a
// collision only makes two bodies wait on each other.
func (r *receiveArgs) lockKey() int32 {
	h := sha256.New()
	h.Write([]byte(r.source))
	h.Write([]byte{0})
	h.Write(r.sum[:])
	return int32(binary.BigEndian.Uint32(h.Sum(nil)))
}

func newReceiveArgs(params *ferry.EventReceiveParams) (*receiveArgs, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	headers, err := encodeHeaders(params.Headers)
	if err != nil {
		return nil, err
	}
	payload := params.Payload
	if payload == nil {
		payload = []byte{} // the column is NOT NULL; an empty body is still a body
	}
	return &receiveArgs{
		source:  params.Source,
		eventID: params.EventID,
		typ:     params.Type,
		payload: payload,
		headers: headers,
		sum:     sha256.Sum256(payload),
		origin:  string(params.Origin.OrDelivery()),

		replayWindowUS: micros(params.ReplayWindow),
		traceparent:    params.Traceparent,
		tracestate:     params.Tracestate,
	}, nil
}

// EventReceive stores one delivery with one statement that commits on its own.
func (s *Store) EventReceive(ctx context.Context, params *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
	r, err := newReceiveArgs(params)
	if err != nil {
		return nil, wrap("event receive", err)
	}
	res, err := s.receiveAlone(ctx, r, s.nowArg())
	return res, wrap("event receive", err)
}

// receiveAlone stores one receipt in a transaction of its own: one
// statement, or the body's lock and the statement in one batch.
func (s *Store) receiveAlone(ctx context.Context, r *receiveArgs, now any) (*ferry.EventReceiveResult, error) {
	var missed redeliveries
	defer s.redeliver(ctx, &missed, now) // after the commit, as a fresh snapshot must see the move
	if r.replayWindowUS == 0 {
		return s.receiveOne(ctx, s.pool, r, now, &missed)
	}
	b := &pgx.Batch{}
	b.Queue(eventReceiveLockSQL, pgx.NamedArgs{"keys": []int32{r.lockKey()}})
	b.Queue(eventReceiveSQL, r.namedArgs(now))
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var res *ferry.EventReceiveResult
	if err == nil {
		res, err = scanReceive(br.QueryRow(), &missed)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		missed = redeliveries{}
		return nil, err
	}
	return res, nil
}

// receiveLocked stores reqs in one transaction: every body's lock first,
// in one order, then the known keys in key order and their events in id
// order, live ones before archived ones, as other receipts, completions,
// requeues and purges lock them, then each receipt in arrival order.
func (s *Store) receiveLocked(ctx context.Context, reqs []*receiveArgs, now any) ([]*ferry.EventReceiveResult, error) {
	var keys []int32
	for _, r := range reqs {
		if r.replayWindowUS > 0 {
			keys = append(keys, r.lockKey())
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	sorted := slices.SortedFunc(slices.Values(reqs), byKey)
	sorted = slices.CompactFunc(sorted, func(a, b *receiveArgs) bool { return byKey(a, b) == 0 })
	sources, eventIDs := make([]string, len(sorted)), make([]string, len(sorted))
	for i, r := range sorted {
		sources[i], eventIDs[i] = r.source, r.eventID
	}
	out := make([]*ferry.EventReceiveResult, len(reqs))
	var missed redeliveries
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		missed = redeliveries{}
		locks := &pgx.Batch{} // one round trip
		locks.Queue(eventReceiveLockSQL, pgx.NamedArgs{"keys": keys})
		locks.Queue(eventReceiveLockKeysSQL, pgx.NamedArgs{"sources": sources, "event_ids": eventIDs})
		if err := tx.SendBatch(ctx, locks).Close(); err != nil {
			return err
		}
		for i, r := range reqs {
			res, err := s.receiveOne(ctx, tx, r, now, &missed)
			if err != nil {
				return err
			}
			out[i] = res
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.redeliver(ctx, &missed, now)
	return out, nil
}

// EventReceiveMany stores the valid receipts in one statement, hence one
// transaction. A statement error (a value PostgreSQL refuses) rolls it all
// back; then each receipt is stored alone, so that one bad delivery cannot
// fail its neighbours. Any other error (the connection, the commit) fails
// the call: none of the receipts is acknowledged.
func (s *Store) EventReceiveMany(ctx context.Context, params *ferry.EventReceiveManyParams) ([]ferry.EventReceiveManyResult, error) {
	const op = "event receive many"
	out := make([]ferry.EventReceiveManyResult, len(params.Receipts))
	var (
		reqs  []*receiveArgs
		index []int // index[j] is the position of reqs[j] in out
	)
	for i, p := range params.Receipts {
		r, err := newReceiveArgs(p)
		if err != nil {
			out[i].Err = wrap(op, err)
			continue
		}
		reqs, index = append(reqs, r), append(index, i)
	}
	now := s.nowArg()
	var results []*ferry.EventReceiveResult
	var err error
	switch len(reqs) {
	case 0:
		return out, nil
	case 1:
		var res *ferry.EventReceiveResult
		res, err = s.receiveAlone(ctx, reqs[0], now)
		results = []*ferry.EventReceiveResult{res}
	default:
		if slices.ContainsFunc(reqs, func(r *receiveArgs) bool { return r.replayWindowUS > 0 }) {
			results, err = s.receiveLocked(ctx, reqs, now)
			break
		}
		results, err = s.receiveMany(ctx, reqs, now)
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if len(reqs) == 1 || !errors.As(err, &pgErr) || pgconn.SafeToRetry(err) || ctx.Err() != nil {
			return nil, wrap(op, err)
		}
		// The server refused the statement: nothing of it committed.
		// Store each receipt in its own transaction.
		for j, r := range reqs {
			res, err := s.receiveAlone(ctx, r, now)
			out[index[j]] = ferry.EventReceiveManyResult{Result: res, Err: wrap(op, err)}
		}
		return out, nil
	}
	for j, res := range results {
		out[index[j]].Result = res
	}
	return out, nil
}

// byKey is the one order receipts lock keys in: by source, then event id,
// bytewise (not by the database's collation, which may differ).
func byKey(a, b *receiveArgs) int {
	return cmp.Or(cmp.Compare(a.source, b.source), cmp.Compare(a.eventID, b.eventID))
}

// receiveMany runs reqs (at least two) as one statement and returns the
// outcome each would have had, run one after the other in arrival order.
func (s *Store) receiveMany(ctx context.Context, reqs []*receiveArgs, now any) ([]*ferry.EventReceiveResult, error) {
	// One lock order for every batch, so that two batches sharing keys wait
	// on each other instead of deadlocking. The sort is stable: deliveries
	// of one key keep their arrival order.
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return byKey(reqs[a], reqs[b]) })

	n := len(reqs)
	var (
		sources, eventIDs, types = make([]string, n), make([]string, n), make([]string, n)
		payloads, sums           = make([][]byte, n), make([][]byte, n)
		headers                  = make([][]byte, n)
		origins                  = make([]string, n)
		isFirst                  = make([]bool, n)
		counts, firstConflicts   = make([]int32, n), make([]int32, n)
		firsts                   []int // position in order of each key's first delivery
	)
	traceparents, tracestates := make([]string, n), make([]string, n)
	for pos, i := range order {
		r := reqs[i]
		sources[pos], eventIDs[pos], types[pos] = r.source, r.eventID, r.typ
		payloads[pos], sums[pos], headers[pos] = r.payload, r.sum[:], r.headers
		origins[pos] = r.origin
		traceparents[pos], tracestates[pos] = r.traceparent, r.tracestate
		if f := len(firsts) - 1; f >= 0 && sameKey(reqs[order[firsts[f]]], r) {
			counts[firsts[f]]++
			first := reqs[order[firsts[f]]]
			if conflicting(first.sum[:], first.origin == catchup, r) {
				firstConflicts[firsts[f]]++
			}
			continue
		}
		isFirst[pos], counts[pos] = true, 1
		firsts = append(firsts, pos)
	}
	rows, _ := s.pool.Query(ctx, eventReceiveManySQL, pgx.NamedArgs{
		"now":             now,
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
		"traceparent":     traceparents,
		"tracestate":      tracestates,
		"notice_keep":     ferry.NoticeKeep,
	})
	// One row per key, in the order of firsts. Outcomes are only handed out
	// once the rows are closed without error: the statement has committed.
	type keyResult struct {
		id           int64
		inserted     bool
		stored       []byte
		caughtUp     bool
		n, differing int32
		touched      bool
		kept         []int64 // positions in order, from 1, of the conflicts kept
	}
	keys := make([]keyResult, 0, len(firsts))
	var k keyResult
	_, err := pgx.ForEachRow(rows, []any{&k.id, &k.inserted, &k.stored, &k.caughtUp, &k.n, &k.differing, &k.touched, &k.kept}, func() error {
		keys = append(keys, k)
		k.kept = nil // the next row's scan must not write into this one's
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(keys) != len(firsts) {
		return nil, fmt.Errorf("%d rows for %d keys", len(keys), len(firsts))
	}
	var missed redeliveries
	for _, kr := range keys {
		if !kr.touched {
			missed.add(kr.id, kr.n, kr.differing)
		}
	}
	s.redeliver(ctx, &missed, now)
	out := make([]*ferry.EventReceiveResult, len(reqs))

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
		case conflicting(kr.stored, kr.caughtUp, reqs[i]):
			res.Outcome = ferry.ReceiveConflict
			res.CountedOnly = !slices.Contains(kr.kept, int64(pos+1))
		default:
			res.Outcome = ferry.ReceiveDuplicate
		}
		out[i] = res
	}
	return out, nil
}

func sameKey(a, b *receiveArgs) bool { return a.source == b.source && a.eventID == b.eventID }

// catchup is ferry.OriginCatchup as the tables spell it.
const catchup = string(ferry.OriginCatchup)

// conflicting is the SQL's conflict rule for a batch: r's bytes differ from
// the key's, both from deliveries (catch-up's copy is never a delivery's
// bytes).
func conflicting(stored []byte, caughtUp bool, r *receiveArgs) bool {
	return !caughtUp && r.origin != catchup && !bytes.Equal(r.sum[:], stored)
}

// rowQuerier runs one statement that returns one row.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// receiveOne runs one receipt's statement on q: the pool (its own implicit
// transaction) or a transaction.
// A delivery whose event the statement did not find is added to missed, to
// be counted once the transaction has committed.
func (s *Store) receiveOne(ctx context.Context, q rowQuerier, r *receiveArgs, now any, missed *redeliveries) (*ferry.EventReceiveResult, error) {
	return scanReceive(q.QueryRow(ctx, eventReceiveSQL, r.namedArgs(now)), missed)
}

func (r *receiveArgs) namedArgs(now any) pgx.NamedArgs {
	return pgx.NamedArgs{
		"now":            now,
		"source":         r.source,
		"event_id":       r.eventID,
		"type":           r.typ,
		"payload":        r.payload,
		"headers":        r.headers,
		"payload_sha256": r.sum[:],
		"origin":         r.origin,

		"replay_window_us": r.replayWindowUS,
		"traceparent":      r.traceparent,
		"tracestate":       r.tracestate,
		"notice_keep":      ferry.NoticeKeep,
	}
}

// scanReceive reads event_receive.sql's row.
func scanReceive(row pgx.Row, missed *redeliveries) (*ferry.EventReceiveResult, error) {
	var (
		result                                 ferry.EventReceiveResult
		inserted, conflicting, replay, touched bool
	)
	err := row.Scan(&result.ID, &inserted, &conflicting, &replay, &touched, &result.CountedOnly)
	if err != nil {
		return nil, err
	}
	if !touched && missed != nil {
		if replay {
			missed.addReplay(result.ID)
		} else {
			missed.add(result.ID, 1, int32(btoi(conflicting)))
		}
	}
	switch {
	case replay:
		result.Outcome = ferry.ReceiveReplay
	case inserted:
		result.Outcome = ferry.ReceiveNew
	case conflicting:
		result.Outcome = ferry.ReceiveConflict
	default:
		result.Outcome = ferry.ReceiveDuplicate
	}
	return &result, nil
}

// redeliveries are deliveries of known keys (and suspected replays) whose
// events a receipt's statement did not find: the event moved between ferry_event and the
// archive while the receipt ran.
type redeliveries struct {
	id64                  []int64
	n, conflicts, replays []int32
}

func (r *redeliveries) add(id int64, n, conflicts int32) { r.addAll(id, n, conflicts, 0) }

// addReplay counts a suspected replay of the event.
func (r *redeliveries) addReplay(id int64) { r.addAll(id, 0, 0, 1) }

func (r *redeliveries) addAll(id int64, n, conflicts, replays int32) {
	r.id64 = append(r.id64, id)
	r.n = append(r.n, n)
	r.conflicts = append(r.conflicts, conflicts)
	r.replays = append(r.replays, replays)
}

// redeliver counts the missed deliveries on their events with a fresh
// snapshot, a few times while events keep moving. The receipts themselves
// have committed (keys, conflicts): only the delivery counters are at
// stake, so an error here is not the receipt's. An event purged meanwhile
// is simply not found.
func (s *Store) redeliver(ctx context.Context, r *redeliveries, now any) {
	for range 3 {
		if len(r.id64) == 0 {
			return
		}
		rows, _ := s.pool.Query(ctx, eventRedeliverSQL, pgx.NamedArgs{
			"now": now, "id": r.id64, "n": r.n, "conflicts": r.conflicts, "replays": r.replays,
		})
		found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return
		}
		var rest redeliveries
		for i, id := range r.id64 {
			if !slices.Contains(found, id) {
				rest.addAll(id, r.n[i], r.conflicts[i], r.replays[i])
			}
		}
		*r = rest
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
