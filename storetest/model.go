package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ferry-inbox/ferry"
)

// modelEvent is the state machine as a few lines of Go: what the store must
// agree with after every random operation.
type modelEvent struct {
	id         int64
	key        string
	state      ferry.State
	attempt    int
	base       int
	deliveries int
	leaseUntil time.Time
	nextAt     time.Time
	firstAt    time.Time // first delivery
	requeuedAt time.Time // zero until requeued
	// lapsed: the newest ended attempt that ran a handler (not a release,
	// nor a fail with NotRun) lapsed. With an expired lease in progress, it
	// is what the next claim's PreviousUnfinished says, across releases and
	// requeues.
	lapsed bool
}

// age is what MaxAge is measured against: from the first delivery or the
// last requeue, whichever is later.
func (e *modelEvent) age(now time.Time) time.Duration {
	from := e.firstAt
	if e.requeuedAt.After(from) {
		from = e.requeuedAt
	}
	return now.Sub(from)
}

func (e *modelEvent) due(now time.Time) (time.Time, bool) {
	switch {
	case e.state == ferry.StatePending && !e.nextAt.After(now):
		return e.nextAt, true
	case e.state == ferry.StateInProgress && !e.leaseUntil.After(now):
		return e.nextAt, true // as old as when it first became due
	}
	return time.Time{}, false
}

func (e *modelEvent) holds(l ferry.Lease, now time.Time) bool {
	return e.state == ferry.StateInProgress && e.attempt == l.Attempt && e.leaseUntil.After(now)
}

// testModel drives random operation sequences against the store and the
// model side by side: receipts, claims (with and without the hold policy),
// heartbeats, completions one by one and many at once, failures under an
// attempt budget and a maximum age, releases, requeues, resolves, retries
// now and the clock. Each check works in a source of its own, so one store
// serves every check.
func testModel[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	b := setup(t)
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		source := fmt.Sprint("model", run)
		events := map[string]*modelEvent{}
		byID := map[int64]*modelEvent{}
		var leases []ferry.Lease // every lease ever handed out, stale ones included

		pickLease := func(rt *rapid.T) (ferry.Lease, *modelEvent) {
			if len(leases) == 0 {
				rt.Skip("no lease yet")
			}
			l := rapid.SampledFrom(leases).Draw(rt, "lease")
			return l, byID[l.ID]
		}
		pickEvent := func(rt *rapid.T) *modelEvent {
			if len(byID) == 0 {
				rt.Skip("no event yet")
			}
			ids := slices.Sorted(maps.Keys(byID))
			return byID[rapid.SampledFrom(ids).Draw(rt, "id")]
		}
		fenced := func(rt *rapid.T, op string, ev *modelEvent, lease ferry.Lease, err error) bool {
			held := ev.holds(lease, b.clock.Now())
			if held && err != nil {
				rt.Fatalf("%s on held lease %v: %v", op, lease, err)
			}
			if !held && !errors.Is(err, ferry.ErrLeaseLost) {
				rt.Fatalf("%s on lost lease %v (event %+v): err = %v, want ErrLeaseLost", op, lease, *ev, err)
			}
			return held
		}

		rt.Repeat(map[string]func(*rapid.T){
			"receive": func(rt *rapid.T) {
				key := rapid.SampledFrom([]string{"a", "b", "c", "d", "e"}).Draw(rt, "key")
				res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: source, EventID: key, Payload: []byte(key)})
				if err != nil {
					rt.Fatal(err)
				}
				if ev, ok := events[key]; ok {
					if res.Outcome != ferry.ReceiveDuplicate || res.ID != ev.id {
						rt.Fatalf("redelivery of %s: %s %d", key, res.Outcome, res.ID)
					}
					ev.deliveries++
					return
				}
				if res.Outcome != ferry.ReceiveNew {
					rt.Fatalf("first delivery of %s: %s", key, res.Outcome)
				}
				ev := &modelEvent{id: res.ID, key: key, state: ferry.StatePending, deliveries: 1, nextAt: b.clock.Now(), firstAt: b.clock.Now()}
				events[key], byID[res.ID] = ev, ev
			},
			"claim": func(rt *rapid.T) {
				limit := rapid.IntRange(1, 3).Draw(rt, "limit")
				hold := rapid.Bool().Draw(rt, "hold")
				now := b.clock.Now()
				var holdSources []string
				if hold { // an expired lease goes to unknown instead of being claimed
					holdSources = []string{source}
					for _, ev := range events {
						if ev.state == ferry.StateInProgress && !ev.leaseUntil.After(now) {
							ev.state, ev.lapsed = ferry.StateUnknown, true
						}
					}
				}
				var due []*modelEvent
				for _, ev := range events {
					if _, ok := ev.due(now); ok {
						due = append(due, ev)
					}
				}
				slices.SortFunc(due, func(x, y *modelEvent) int {
					dx, _ := x.due(now)
					dy, _ := y.due(now)
					return cmp.Or(dx.Compare(dy), cmp.Compare(x.id, y.id))
				})
				want := due[:min(limit, len(due))]
				claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: limit, TTL: ttl, Sources: []string{source}, HoldSources: holdSources})
				if err != nil {
					rt.Fatal(err)
				}
				if len(claims) != len(want) {
					rt.Fatalf("claimed %d, want %d", len(claims), len(want))
				}
				for i, c := range claims {
					ev := want[i]
					if c.Event.ID != ev.id {
						rt.Fatalf("claim %d got event %d, want %d (oldest due first)", i, c.Event.ID, ev.id)
					}
					expired := ev.state == ferry.StateInProgress // its attempt is closed as lease_expired
					if want := expired || ev.lapsed; c.PreviousUnfinished != want || c.Reclaimed != expired {
						rt.Fatalf("event %d from state %s: PreviousUnfinished = %v, Reclaimed = %v; want %v, %v", ev.id, ev.state, c.PreviousUnfinished, c.Reclaimed, want, expired)
					}
					ev.lapsed = ev.lapsed || expired
					ev.state, ev.attempt, ev.leaseUntil = ferry.StateInProgress, ev.attempt+1, now.Add(ttl)
					leases = append(leases, c.Event.Lease())
				}
			},
			"heartbeat": func(rt *rapid.T) {
				lease, ev := pickLease(rt)
				_, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: ttl})
				if fenced(rt, "heartbeat", ev, lease, err) {
					ev.leaseUntil = b.clock.Now().Add(ttl)
				}
			},
			"complete": func(rt *rapid.T) {
				lease, ev := pickLease(rt)
				err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease})
				if fenced(rt, "complete", ev, lease, err) {
					ev.state, ev.lapsed = ferry.StateDone, false
				}
			},
			"complete_many": func(rt *rapid.T) {
				if len(leases) == 0 {
					rt.Skip("no lease yet")
				}
				named := rapid.SliceOfN(rapid.SampledFrom(leases), 1, 4).Draw(rt, "leases")
				now := b.clock.Now()
				var wantLost, done []ferry.Lease
				for _, l := range named {
					switch {
					case slices.Contains(wantLost, l) || slices.Contains(done, l):
					case byID[l.ID].holds(l, now):
						done = append(done, l)
					default:
						wantLost = append(wantLost, l)
					}
				}
				lost, err := b.store.EventCompleteMany(b.ctx, &ferry.EventCompleteManyParams{Leases: named})
				if err != nil {
					rt.Fatal(err)
				}
				if !slices.Equal(lost, wantLost) {
					rt.Fatalf("complete many %v: lost %v, want %v", named, lost, wantLost)
				}
				for _, l := range done {
					byID[l.ID].state, byID[l.ID].lapsed = ferry.StateDone, false
				}
			},
			"fail": func(rt *rapid.T) {
				lease, ev := pickLease(rt)
				delay := time.Duration(rapid.IntRange(0, 40).Draw(rt, "delay_s")) * time.Second
				maxAttempts := rapid.IntRange(0, 3).Draw(rt, "max_attempts")
				maxAge := rapid.SampledFrom([]time.Duration{0, 20 * time.Second, time.Minute}).Draw(rt, "max_age")
				notRun := rapid.Bool().Draw(rt, "not_run")
				state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "e", RetryDelay: delay, MaxAttempts: maxAttempts, MaxAge: maxAge, NotRun: notRun})
				if !fenced(rt, "fail", ev, lease, err) {
					return
				}
				want := ferry.StatePending
				if (maxAttempts > 0 && ev.attempt-ev.base >= maxAttempts) || (maxAge > 0 && ev.age(b.clock.Now()) >= maxAge) {
					want = ferry.StateDead
				}
				if state != want {
					rt.Fatalf("fail -> %s, want %s", state, want)
				}
				ev.state, ev.nextAt = want, b.clock.Now().Add(delay)
				if !notRun { // an attempt that ran no handler is passed over, as a release is
					ev.lapsed = false
				}
			},
			"release": func(rt *rapid.T) {
				lease, ev := pickLease(rt)
				err := b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: lease})
				if fenced(rt, "release", ev, lease, err) {
					ev.state, ev.nextAt = ferry.StatePending, b.clock.Now() // lapsed as it was
				}
			},
			"requeue": func(rt *rapid.T) {
				ev := pickEvent(rt)
				n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{ev.id}, Actor: "op"})
				if err != nil {
					rt.Fatal(err)
				}
				if want := map[bool]int{true: 1, false: 0}[ev.state.Terminal()]; n != want {
					rt.Fatalf("requeue of %s event = %d, want %d", ev.state, n, want)
				}
				if n == 1 {
					ev.state, ev.nextAt, ev.base, ev.requeuedAt = ferry.StatePending, b.clock.Now(), ev.attempt, b.clock.Now()
				}
			},
			"resolve": func(rt *rapid.T) {
				ev := pickEvent(rt)
				n, err := b.store.EventResolve(b.ctx, &ferry.EventResolveParams{IDs: []int64{ev.id}, Actor: "op"})
				if err != nil {
					rt.Fatal(err)
				}
				closable := ev.state == ferry.StateDead || ev.state == ferry.StateUnknown
				if want := map[bool]int{true: 1, false: 0}[closable]; n != want {
					rt.Fatalf("resolve of %s event = %d, want %d", ev.state, n, want)
				}
				if closable {
					ev.state = ferry.StateDone // no attempt: none ran
				}
			},
			"retry_now": func(rt *rapid.T) {
				ev := pickEvent(rt)
				now := b.clock.Now()
				ok, err := b.store.EventRetryNow(b.ctx, &ferry.EventRetryNowParams{ID: ev.id, Actor: "op"})
				if err != nil {
					rt.Fatal(err)
				}
				inBackoff := ev.state == ferry.StatePending && ev.nextAt.After(now)
				if ok != inBackoff {
					rt.Fatalf("retry now of %s event due %v (now %v) = %v, want %v", ev.state, ev.nextAt, now, ok, inBackoff)
				}
				if ok {
					ev.nextAt = now
				}
			},
			"advance": func(rt *rapid.T) {
				b.clock.Advance(rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, ttl - time.Second, ttl}).Draw(rt, "advance"))
			},
			"": func(rt *rapid.T) {
				page, err := b.store.EventList(b.ctx, &ferry.EventListParams{Source: source})
				if err != nil {
					rt.Fatal(err)
				}
				if len(page.Events) != len(events) {
					rt.Fatalf("store has %d events, model %d", len(page.Events), len(events))
				}
				for _, got := range page.Events {
					want := byID[got.ID]
					if want == nil {
						rt.Fatalf("store has event %d the model lacks", got.ID)
					}
					if got.State != want.state || got.Attempt != want.attempt || got.Deliveries != want.deliveries {
						rt.Fatalf("event %s: store (%s, attempt %d, deliveries %d), model (%s, %d, %d)",
							want.key, got.State, got.Attempt, got.Deliveries, want.state, want.attempt, want.deliveries)
					}
					if want.state == ferry.StateInProgress && !got.LeaseExpiresAt.Equal(want.leaseUntil) {
						rt.Fatalf("event %s lease until %v, model %v", want.key, got.LeaseExpiresAt, want.leaseUntil)
					}
					if want.state == ferry.StatePending && !got.NextAttemptAt.Equal(want.nextAt) {
						rt.Fatalf("event %s next attempt %v, model %v", want.key, got.NextAttemptAt, want.nextAt)
					}
				}
			},
		})
	})
}
