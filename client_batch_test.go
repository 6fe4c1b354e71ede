package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// roundTrips records the store calls of the claim loop, the heartbeats and
// the failures, to show what the client batches.
type roundTrips struct {
	ferry.Store
	mu         sync.Mutex
	claimLimit []int // Limit of every EventClaimMany call
	beats      []int // leases of every EventHeartbeatMany call
	singleBeat int   // EventHeartbeat calls
	fails      []int // failures of every EventFailMany call
	singleFail int   // EventFail calls
}

// note records a call under the lock.
func (s *roundTrips) note(record func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	record()
}

func (s *roundTrips) EventClaimMany(ctx context.Context, p *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	s.note(func() { s.claimLimit = append(s.claimLimit, p.Limit) })
	return s.Store.EventClaimMany(ctx, p)
}

func (s *roundTrips) EventHeartbeat(ctx context.Context, p *ferry.EventHeartbeatParams) (time.Time, error) {
	s.note(func() { s.singleBeat++ })
	return s.Store.EventHeartbeat(ctx, p)
}

func (s *roundTrips) EventHeartbeatMany(ctx context.Context, p *ferry.EventHeartbeatManyParams) ([]ferry.Lease, error) {
	s.note(func() { s.beats = append(s.beats, len(p.Leases)) })
	return s.Store.EventHeartbeatMany(ctx, p)
}

func (s *roundTrips) EventFail(ctx context.Context, p *ferry.EventFailParams) (ferry.State, error) {
	s.note(func() { s.singleFail++ })
	return s.Store.EventFail(ctx, p)
}

func (s *roundTrips) EventFailMany(ctx context.Context, p *ferry.EventFailManyParams) ([]ferry.State, error) {
	s.note(func() { s.fails = append(s.fails, len(p.Failures)) })
	return s.Store.EventFailMany(ctx, p)
}

// waitFor polls cond until it holds, failing after a ceiling only a bug
// reaches.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *clientBundle) countState(t *testing.T, state ferry.State) int {
	t.Helper()
	page, err := b.store.EventList(b.ctx, &ferry.EventListParams{States: []ferry.State{state}, Limit: ferry.EventListLimitMax})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Events)
}

// One heartbeat call per tick carries every lease the client holds: those
// of running handlers and those of events claimed ahead, waiting.
func TestClientHeartbeatsEveryLeaseInOneCall(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	for i := range 10 {
		b.receive(t, "stripe", fmt.Sprint("evt_", i))
	}
	store := &roundTrips{Store: b.store}
	const workers, prefetch = 4, 2
	c := b.newClient(t, func(c *ferry.Config) {
		c.Store = store
		c.Workers, c.Prefetch = workers, prefetch
		c.HeartbeatInterval = 20 * time.Millisecond
	})
	gate := make(chan struct{})
	c.Handle("stripe", func(ctx context.Context, _ *ferry.Delivery) error {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	})
	start(t, c)
	defer close(gate)
	waitFor(t, "a heartbeat of every held lease", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return slices.Contains(store.beats, workers+prefetch)
	})
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.singleBeat != 0 {
		t.Errorf("%d single heartbeats besides the batched ones", store.singleBeat)
	}
	if m := slices.Max(store.beats); m > workers+prefetch {
		t.Errorf("a heartbeat carried %d leases; the client may hold %d", m, workers+prefetch)
	}
}

// The client holds Workers running events and at most Prefetch claimed
// ahead; at Stop, those still waiting go back to pending, released, never
// run.
func TestClientClaimsAheadAndReleasesTheWaitingAtStop(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	var ids []int64
	for i := range 10 {
		ids = append(ids, b.receive(t, "stripe", fmt.Sprint("evt_", i)))
	}
	const workers, prefetch = 2, 2
	obs := &outcomes{got: map[ferry.Outcome]int{}}
	c := b.newClient(t, func(c *ferry.Config) {
		c.Workers, c.Prefetch, c.Observer = workers, prefetch, obs
		c.ShutdownGrace = time.Millisecond
	})
	var mu sync.Mutex
	ran := map[int64]bool{}
	c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
		mu.Lock()
		ran[d.Event.ID] = true
		mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	})
	if err := c.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two handlers running and two events claimed ahead", func() bool {
		mu.Lock()
		n := len(ran)
		mu.Unlock()
		return n == workers && b.countState(t, ferry.StateInProgress) == workers+prefetch
	})
	if err := c.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.countState(t, ferry.StatePending); n != len(ids) {
		t.Fatalf("%d of %d events pending after Stop", n, len(ids))
	}
	if n := len(ran); n != workers {
		t.Errorf("%d handlers ran, want %d: a waiting event was run", n, workers)
	}
	for _, id := range ids {
		out := b.outcomes(t, id)
		if len(out) > 1 || len(out) == 1 && out[0] != ferry.OutcomeReleased {
			t.Errorf("event %d ledger = %v, want nothing or one released attempt", id, out)
		}
	}
	if got := obs.count(ferry.OutcomeReleased); got != workers+prefetch {
		t.Errorf("%d attempts released, want %d", got, workers+prefetch)
	}
}

// Events of a hold source are claimed only into idle workers: one claimed
// ahead would go unknown, for a person to decide, if the worker died before
// it started. Retry sources are still claimed ahead.
func TestClientClaimsHoldSourcesOnlyIntoIdleWorkers(t *testing.T) {
	t.Parallel()
	b := setupClient(t, true)
	first, second := b.receive(t, "bank", "evt_a"), b.receive(t, "bank", "evt_b")
	retried := b.receive(t, "stripe", "evt_c")
	release := make(chan struct{})
	defer close(release)
	c := b.newClient(t, func(c *ferry.Config) {
		c.Workers, c.Prefetch = 1, 1
		c.Sources = []ferry.SourcePolicy{{Name: "bank", LostLease: ferry.LostLeaseHold}}
	})
	c.Handle("bank", doneOn(release))
	c.Handle("stripe", doneOn(release))
	start(t, c)
	b.waitState(t, first, ferry.StateInProgress)
	b.waitState(t, retried, ferry.StateInProgress) // claimed ahead of the one worker
	if ev := b.waitState(t, second, ferry.StatePending); ev.Attempt != 0 {
		t.Fatalf("evt_b was claimed ahead (attempt %d)", ev.Attempt)
	}
	// The worker dies: its leases lapse, and another instance claims.
	b.clock.Advance(time.Minute)
	if _, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{
		Owner: "other", Limit: 10, TTL: time.Minute, HoldSources: []string{"bank"},
	}); err != nil {
		t.Fatal(err)
	}
	if ev := b.waitState(t, first, ferry.StateUnknown); ev.Attempt != 1 {
		t.Errorf("evt_a, whose handler ran, is unknown at attempt %d, want 1", ev.Attempt)
	}
	b.wantLedger(t, second, "[running]") // never started before: an ordinary first attempt
}

// A steady stream of retry events does not starve a hold source: claims
// ahead of retry sources never follow one another, so the hold event, older
// than the stream, runs within a few of its events.
func TestClientHoldSourcesAreNotStarvedByAStream(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	for i := range 5 {
		b.receive(t, "stripe", fmt.Sprint("old_", i))
	}
	bank := b.receive(t, "bank", "evt_bank")
	var streamed, before atomic.Int64 // stripe events run; how many ran before bank's
	c := b.newClient(t, func(c *ferry.Config) {
		c.Workers, c.Prefetch = 1, 1
		c.Sources = []ferry.SourcePolicy{{Name: "bank", LostLease: ferry.LostLeaseHold}}
	})
	c.Handle("bank", func(context.Context, *ferry.Delivery) error {
		before.Store(streamed.Load())
		return nil
	})
	c.Handle("stripe", func(context.Context, *ferry.Delivery) error {
		if n := streamed.Add(1); n < 300 {
			b.receive(t, "stripe", fmt.Sprint("new_", n)) // one more due each time
		}
		return nil
	})
	start(t, c)
	b.waitState(t, bank, ferry.StateDone)
	if n := before.Load(); n > 20 {
		t.Errorf("the hold event ran after %d stripe events, behind the stream (5 were older)", n)
	}
}

// A claim ahead of retry sources only that comes back short says nothing
// about the hold sources: a worker that frees takes the next hold event at
// once, not at the next poll.
func TestClientHoldEventsFollowAShortClaimAhead(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	first, next := b.receive(t, "bank", "evt_a"), b.receive(t, "bank", "evt_b")
	release := make(chan struct{})
	c := b.newClient(t, func(c *ferry.Config) {
		c.Workers, c.Prefetch, c.PollInterval = 1, 1, time.Hour // no poll after the first
		c.Sources = []ferry.SourcePolicy{{Name: "bank", LostLease: ferry.LostLeaseHold}}
	})
	c.Handle("bank", func(ctx context.Context, d *ferry.Delivery) error {
		if d.Event.ID == first {
			return doneOn(release)(ctx, d)
		}
		return nil
	})
	c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil }) // nothing due
	start(t, c)
	b.waitState(t, first, ferry.StateInProgress)
	close(release)
	b.waitState(t, next, ferry.StateDone)
}

// A saturated client claims in batches of at least Prefetch, never one
// event per finished job.
func TestClientClaimsInBatches(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	const n = 60
	var ids []int64
	for i := range n {
		ids = append(ids, b.receive(t, "stripe", fmt.Sprint("evt_", i)))
	}
	store := &roundTrips{Store: b.store}
	const workers, prefetch = 4, 2
	c := b.newClient(t, func(c *ferry.Config) { c.Store = store; c.Workers, c.Prefetch = workers, prefetch })
	c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil })
	start(t, c)
	for _, id := range ids {
		b.waitState(t, id, ferry.StateDone)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if m := slices.Min(store.claimLimit); m < prefetch {
		t.Errorf("claim limits %v: a claim asked for %d, below the batch of %d", store.claimLimit, m, prefetch)
	}
	if m := slices.Max(store.claimLimit); m > workers+prefetch {
		t.Errorf("claim limits %v: a claim asked for %d, past the %d the client may hold", store.claimLimit, m, workers+prefetch)
	}
}

// Failures of concurrent jobs share EventFailMany calls; each event still
// gets its own verdict.
func TestClientBatchedFailures(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	const n = 20
	var ids []int64
	for i := range n {
		ids = append(ids, b.receive(t, "stripe", fmt.Sprint("evt_", i)))
	}
	store := &roundTrips{Store: b.store}
	c := b.newClient(t, func(c *ferry.Config) {
		c.Store = store
		c.Workers = n
	})
	var started sync.WaitGroup
	started.Add(n)
	gate := make(chan struct{})
	c.Handle("stripe", func(_ context.Context, d *ferry.Delivery) error {
		started.Done()
		<-gate
		if d.Event.ID == ids[0] {
			return ferry.Permanent(errors.New("gone"))
		}
		// An hour at least, whatever the backoff's jitter draws (it may
		// draw 0): the retry stays pending, never claimed again here.
		return ferry.RetryAfter(errors.New("downstream 500"), time.Hour)
	})
	start(t, c)
	started.Wait()
	close(gate)
	for _, id := range ids[1:] {
		ev := b.waitState(t, id, ferry.StatePending)
		if ev.LastError != "downstream 500" {
			t.Errorf("event %d last error %q", id, ev.LastError)
		}
		b.wantLedger(t, id, "[failed]")
	}
	b.waitState(t, ids[0], ferry.StateDead)
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.singleFail != 0 || slices.Max(store.fails) < 2 || len(store.fails) >= n {
		t.Errorf("%d single failures, batches %v: failures of concurrent jobs were not batched", store.singleFail, store.fails)
	}
}

// pausedClaims holds the second EventClaimMany call until a third one is
// asked, to show whether the client asks for its next batch while the last
// is still on its way.
type pausedClaims struct {
	ferry.Store
	calls atomic.Int64
	third chan struct{}
}

func (s *pausedClaims) EventClaimMany(ctx context.Context, p *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	switch s.calls.Add(1) {
	case 2:
		select {
		case <-s.third:
		case <-ctx.Done(): // the claim's own timeout, one lease TTL
		}
	case 3:
		close(s.third)
	}
	return s.Store.EventClaimMany(ctx, p)
}

// A claim's round trip does not stall the client: once Prefetch places free
// while a claim is on its way, the next one is asked at once.
func TestClientClaimsWhileAClaimIsInFlight(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	for i := range 10 {
		b.receive(t, "stripe", fmt.Sprint("evt_", i))
	}
	store := &pausedClaims{Store: b.store, third: make(chan struct{})}
	c := b.newClient(t, func(c *ferry.Config) { c.Store = store; c.Workers, c.Prefetch = 2, 1 })
	next := make(chan struct{})
	c.Handle("stripe", doneOn(next))
	start(t, c)
	defer close(next)
	next <- struct{}{} // a place frees: the second claim is asked, and held
	waitFor(t, "the second claim", func() bool { return store.calls.Load() >= 2 })
	next <- struct{}{} // another frees while the second is still on its way
	select {
	case <-store.third:
	case <-time.After(30 * time.Second):
		t.Fatal("no claim was asked while the previous one was in flight")
	}
}
