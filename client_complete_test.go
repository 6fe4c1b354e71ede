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

// batchingStore records how the client completes events, and can lose a
// lease or fail a batch on purpose.
type batchingStore struct {
	ferry.Store
	mu       sync.Mutex
	batches  []int        // size of every EventCompleteMany call
	singles  atomic.Int64 // EventComplete calls
	lose     ferry.Lease  // reported lost (and not completed) when named
	failNext atomic.Int64 // this many calls fail before reaching the store
}

func (s *batchingStore) EventComplete(ctx context.Context, p *ferry.EventCompleteParams) error {
	s.singles.Add(1)
	return s.Store.EventComplete(ctx, p)
}

func (s *batchingStore) EventCompleteMany(ctx context.Context, p *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	s.mu.Lock()
	s.batches = append(s.batches, len(p.Leases))
	s.mu.Unlock()
	if s.failNext.Add(-1) >= 0 {
		return nil, errors.New("connection reset (injected)")
	}
	var keep, lost []ferry.Lease
	for _, l := range p.Leases {
		if l == s.lose {
			lost = append(lost, l)
		} else {
			keep = append(keep, l)
		}
	}
	more, err := s.Store.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: keep})
	return append(lost, more...), err
}

// outcomes is an Observer that keeps every attempt's outcome.
type outcomes struct {
	mu  sync.Mutex
	got map[ferry.Outcome]int
}

func (o *outcomes) AttemptFinished(_ string, outcome ferry.Outcome, _ bool, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got[outcome]++
}

func (o *outcomes) count(outcome ferry.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got[outcome]
}

func TestClientBatchedCompletion(t *testing.T) {
	t.Parallel()

	receive := func(t *testing.T, b *clientBundle, n int) []int64 {
		t.Helper()
		var ids []int64
		for i := range n {
			ids = append(ids, b.receive(t, "stripe", fmt.Sprint("evt_", i)))
		}
		return ids
	}
	// run works the n received events, their handlers all returning nil
	// together, and waits until every first attempt has reported its end.
	run := func(t *testing.T, b *clientBundle, store *batchingStore, n int) *outcomes {
		t.Helper()
		obs := &outcomes{got: map[ferry.Outcome]int{}}
		c := b.newClient(t, func(c *ferry.Config) { c.Store = store; c.Workers = n; c.Observer = obs })
		var started sync.WaitGroup
		started.Add(n)
		gate := make(chan struct{})
		c.Handle("stripe", func(_ context.Context, d *ferry.Delivery) error {
			if d.Attempt == 1 {
				started.Done()
				<-gate
			}
			return nil
		})
		start(t, c)
		started.Wait()
		close(gate)
		deadline := time.Now().Add(20 * time.Second)
		for {
			obs.mu.Lock()
			total := 0
			for _, v := range obs.got {
				total += v
			}
			obs.mu.Unlock()
			if total >= n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d attempts ended", total, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return obs
	}

	withClient(t, "ConcurrentJobsShareABatch", false, func(t *testing.T, b *clientBundle) {
		store := &batchingStore{Store: b.store}
		const n = 40
		ids := receive(t, b, n)
		obs := run(t, b, store, n)
		for _, id := range ids {
			b.waitState(t, id, ferry.StateDone)
		}
		if got := obs.count(ferry.OutcomeDone); got != n {
			t.Errorf("%d attempts done, want %d", got, n)
		}
		store.mu.Lock()
		defer store.mu.Unlock()
		if store.singles.Load() != 0 || slices.Max(store.batches) < 2 || len(store.batches) >= n {
			t.Errorf("%d single completions, batches %v: completions of concurrent jobs were not batched", store.singles.Load(), store.batches)
		}
	})

	// The store reports one lease of a batch lost: that job alone records
	// lease_expired, the others are done, and the event is claimed again
	// once its lease lapses (here, by the same client after it).
	withClient(t, "ALostLeaseIsReportedToItsOwnJobOnly", true, func(t *testing.T, b *clientBundle) {
		store := &batchingStore{Store: b.store}
		const n = 10
		ids := receive(t, b, n)
		store.lose = ferry.Lease{ID: ids[3], Attempt: 1}
		obs := run(t, b, store, n)
		if got, lost := obs.count(ferry.OutcomeDone), obs.count(ferry.OutcomeLeaseExpired); got != n-1 || lost != 1 {
			t.Fatalf("first attempts: %d done, %d lease_expired; want %d and 1", got, lost, n-1)
		}
		for i, id := range ids {
			if i == 3 {
				ev := b.waitState(t, id, ferry.StateInProgress)
				if ev.Attempt != 1 {
					t.Errorf("lost event: attempt %d, want 1 still (nothing changed)", ev.Attempt)
				}
				continue
			}
			b.waitState(t, id, ferry.StateDone)
		}
		b.clock.Advance(time.Minute) // the database says the lost lease is over
		ev := b.waitState(t, ids[3], ferry.StateDone)
		if ev.Attempt != 2 {
			t.Errorf("lost event done at attempt %d, want 2 (claimed again)", ev.Attempt)
		}
		b.wantLedger(t, ids[3], "[lease_expired done]")
	})

	// A batch that fails as a whole fails every job in it; each retries
	// within its lease, and all of them end done.
	withClient(t, "AFailedBatchIsRetriedByEveryJob", false, func(t *testing.T, b *clientBundle) {
		store := &batchingStore{Store: b.store}
		store.failNext.Store(2)
		const n = 20
		ids := receive(t, b, n)
		obs := run(t, b, store, n)
		if got := obs.count(ferry.OutcomeDone); got != n {
			t.Fatalf("%d attempts done, want %d (%v)", got, n, obs.got)
		}
		for _, id := range ids {
			b.waitState(t, id, ferry.StateDone)
			b.wantLedger(t, id, "[done]")
		}
	})
}
