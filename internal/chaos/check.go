//go:build unix

package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/ferry-inbox/ferry"
)

// observed is everything the checker compares: what the sender saw
// acknowledged, what the store holds, and what the effects were.
type observed struct {
	events []*event
	stored map[string]*ferry.Event // key → stored event
	// payloadSHA is the hex SHA-256 of each stored event's payload bytes,
	// hashed here rather than read from payload_sha256, which a broken
	// receiver could write apart from the bytes it stores.
	payloadSHA map[string]string
	ledger     map[string][]*ferry.Attempt
	effects    []effect // every 2xx the sink answered, or every chaos_effect row
	kills      map[int]time.Time
	tx         bool
	// reclaim: measure max_reclaim_ms (kill, where a worker survives to
	// take the lease back; in crashloop none does, and zombie's pauses
	// would make it measure the harness).
	reclaim bool
}

// collect reads the store and the effects after the drain.
func (e *env) collect(ctx context.Context, evs []*event) (*observed, error) {
	o := &observed{events: evs, stored: map[string]*ferry.Event{}, payloadSHA: map[string]string{}, ledger: map[string][]*ferry.Attempt{}, kills: e.killTimes(), tx: e.opts.Handler == "tx",
		reclaim: e.measureReclaim}
	var before int64
	for {
		res, err := e.store.EventList(ctx, &ferry.EventListParams{Before: before, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("chaos: list events: %w", err)
		}
		for _, ev := range res.Events {
			o.stored[ferry.IdempotencyKey(ev.Source, ev.EventID)] = ev
		}
		if res.NextBefore == 0 {
			break
		}
		before = res.NextBefore
	}
	// EventList leaves payloads out; each is read once to hash its bytes.
	for key, ev := range o.stored {
		full, err := e.store.EventGet(ctx, &ferry.EventGetParams{ID: ev.ID})
		if err != nil {
			return nil, fmt.Errorf("chaos: get %s: %w", ev.EventID, err)
		}
		sum := sha256.Sum256(full.Payload)
		o.payloadSHA[key] = hex.EncodeToString(sum[:])
	}
	// Only events claimed more than once can hold a duplicate, a stale
	// write or a reclaim; the rest have one ledger row at most.
	for key, ev := range o.stored {
		if ev.Attempt <= 1 {
			continue
		}
		atts, err := e.store.AttemptList(ctx, &ferry.AttemptListParams{ID: ev.ID})
		if err != nil {
			return nil, fmt.Errorf("chaos: attempts of %s: %w", ev.EventID, err)
		}
		o.ledger[key] = atts
	}
	if o.tx {
		rows, err := e.txEffects(ctx)
		if err != nil {
			return nil, err
		}
		o.effects = rows
	} else {
		for _, r := range e.sink.snapshot() {
			if r.status/100 == 2 {
				o.effects = append(o.effects, r)
			}
		}
	}
	return o, nil
}

func (e *env) txEffects(ctx context.Context) ([]effect, error) {
	const q = `SELECT idempotency_key, source, event_id, attempt, body_sha256 FROM chaos_effect`
	if e.pg != nil {
		rows, err := e.pg.Pool().Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("chaos: read chaos_effect: %w", err)
		}
		defer rows.Close()
		return scanEffects(rows.Next, rows.Scan, rows.Err)
	}
	rows, err := e.sqlDB().QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("chaos: read chaos_effect: %w", err)
	}
	defer rows.Close()
	return scanEffects(rows.Next, rows.Scan, rows.Err)
}

// scanEffects reads chaos_effect rows from either store's result set. A row
// is an effect the transactional handler committed, so it counts as a 2xx.
func scanEffects(next func() bool, scan func(...any) error, rowsErr func() error) ([]effect, error) {
	var out []effect
	for next() {
		r := effect{status: 200}
		if err := scan(&r.key, &r.source, &r.eventID, &r.attempt, &r.sha); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rowsErr()
}

// check applies Jepsen's queue rule to o and fills r's counters:
//
//   - lost: an acknowledged event that is not stored, not done, or done
//     without an effect;
//   - unexpected: a stored event or an effect the sender never sent, or a
//     stored payload or an effect whose body is not the body sent;
//   - duplicate_effects: effects beyond the first of each event;
//   - untraced_duplicates: effects not accounted for by a distinct attempt
//     in the ledger (two effects under one attempt, or under an attempt the
//     ledger lacks);
//   - stale_writes_accepted: an attempt that reported an end after a later
//     attempt had started, a second done, or (tx) an effect committed by an
//     attempt that is not the one that completed the event;
//   - max_reclaim_ms: from the kill of a worker holding a lease to the next
//     attempt's start, the slowest (kill only).
func check(o *observed, r *Result) {
	sent := map[string]*event{}
	for _, ev := range o.events {
		sent[ev.key] = ev
	}
	byKey := map[string][]effect{}
	for _, f := range o.effects {
		byKey[f.key] = append(byKey[f.key], f)
	}
	r.Events = len(o.events)
	for _, ev := range o.events {
		if ev.ackedAt.Load() != 0 {
			r.Acked++
		}
		if _, ok := o.stored[ev.key]; ok {
			r.Stored++
		}
	}
	for _, ev := range o.events {
		if ev.ackedAt.Load() == 0 {
			continue
		}
		st, ok := o.stored[ev.key]
		switch {
		case !ok:
			r.lose(ev, "acknowledged but not stored")
		case st.State != ferry.StateDone:
			r.lose(ev, "acknowledged but "+string(st.State)+" after the drain")
		case len(byKey[ev.key]) == 0:
			r.lose(ev, "done in the store but its effect never happened")
		}
	}
	for key, st := range o.stored {
		if _, ok := sent[key]; !ok {
			r.Unexpected++
			r.note("unexpected stored event %s/%s", st.Source, st.EventID)
		} else if o.payloadSHA[key] != sent[key].sha {
			r.Unexpected++
			r.note("stored payload of %s differs from the one sent", st.EventID)
		}
	}
	for key, fs := range byKey {
		ev, ok := sent[key]
		if !ok {
			r.Unexpected += len(fs)
			r.note("unexpected effect for key %s", key)
			continue
		}
		r.Effects++
		r.DuplicateEffects += len(fs) - 1
		for _, f := range fs {
			if f.sha != ev.sha {
				r.Unexpected++
				r.note("effect of %s carried a body that was not sent", ev.id)
			}
		}
		if len(fs) == 1 {
			continue
		}
		atts := map[int]bool{}
		for _, a := range o.ledger[key] {
			atts[a.Attempt] = true
		}
		seen := map[int]bool{}
		for _, f := range fs {
			if !atts[f.attempt] || seen[f.attempt] {
				r.UntracedDuplicates++
				r.note("duplicate effect of %s (attempt %d) has no attempt of its own in the ledger", ev.id, f.attempt)
			}
			seen[f.attempt] = true
		}
	}
	for key, atts := range o.ledger {
		done := 0
		for i, a := range atts {
			if a.Outcome == ferry.OutcomeDone {
				done++
			}
			if i+1 < len(atts) {
				next := atts[i+1]
				closedByOwner := a.Outcome != ferry.OutcomeLeaseExpired && a.Outcome != ferry.OutcomeRunning
				if closedByOwner && !a.FinishedAt.IsZero() && a.FinishedAt.After(next.StartedAt) {
					r.StaleWritesAccepted++
					r.note("attempt %d of %s was closed %s by its worker after attempt %d started", a.Attempt, sent[key].idOr(key), a.Outcome, next.Attempt)
				}
				if a.Outcome == ferry.OutcomeLeaseExpired && o.reclaim {
					if kill, ok := o.kills[pidOf(a.Worker)]; ok && !kill.Before(a.StartedAt.Add(-time.Millisecond)) && !kill.After(next.StartedAt) {
						r.MaxReclaimMS = max(r.MaxReclaimMS, next.StartedAt.Sub(kill).Milliseconds())
					}
				}
			}
		}
		if done > 1 {
			r.StaleWritesAccepted += done - 1
			r.note("%s was completed %d times", sent[key].idOr(key), done)
		}
	}
	if o.tx {
		for key, fs := range byKey {
			st, ok := o.stored[key]
			if !ok {
				continue
			}
			for _, f := range fs {
				if !(st.State == ferry.StateDone && f.attempt == st.Attempt) && !requeuedAfter(o.ledger[key], f.attempt) {
					r.StaleWritesAccepted++
					r.note("effect of %s committed by attempt %d, but attempt %d completed it", st.EventID, f.attempt, st.Attempt)
				}
			}
		}
	}
}

// requeuedAfter: an effect of an attempt that completed before an operator
// replay is not stale (dlq replays only dead events, so this stays false
// there; it is here so a replayed done event would not be miscounted).
func requeuedAfter(atts []*ferry.Attempt, attempt int) bool {
	for _, a := range atts {
		if a.Attempt == attempt && a.Outcome == ferry.OutcomeDone {
			return true
		}
	}
	return false
}

func (ev *event) idOr(key string) string {
	if ev == nil {
		return key
	}
	return ev.id
}

func (r *Result) lose(ev *event, why string) {
	r.Lost++
	r.note("LOST %s/%s: %s", ev.src.name, ev.id, why)
}

// note keeps the first few findings for the report.
func (r *Result) note(format string, args ...any) {
	if len(r.Notes) < 10 {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}
