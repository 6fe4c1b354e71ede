package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// heartbeatMany calls EventHeartbeatMany with the suite's ttl and fails the
// test on an error.
func heartbeatMany[TX any](t *testing.T, b *bundle[TX], leases ...ferry.Lease) []ferry.Lease {
	t.Helper()
	lost, err := b.store.EventHeartbeatMany(b.ctx, &ferry.EventHeartbeatManyParams{Leases: leases, TTL: ttl})
	if err != nil {
		t.Fatalf("EventHeartbeatMany(%v): %v", leases, err)
	}
	return lost
}

// testHeartbeatMany checks EventHeartbeatMany: held leases are extended from
// the database's now, each fenced as EventHeartbeat is; the others are
// reported in the order named and left alone.
func testHeartbeatMany[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "HeldAreExtendedLostAreReportedAndUntouched", func(t *testing.T, b *bundle[TX]) {
		m := claimMixedLeases(t, b)
		robbed, expired, done, held, other, stale := m.robbed, m.expired, m.done, m.held, m.other, m.stale
		b.clock.Advance(ttl / 2)
		before := snapLost(t, b, m)
		lost := heartbeatMany(t, b, held, robbed, expired, other, done, stale, held)
		if want := []ferry.Lease{robbed, expired, done, stale}; !slices.Equal(lost, want) {
			t.Fatalf("lost = %v, want %v (in the order named, each once)", lost, want)
		}
		for _, id := range []int64{held.ID, other.ID} {
			ev := wantState(t, b, id, ferry.StateInProgress)
			if want := b.clock.Now().Add(ttl); !ev.LeaseExpiresAt.Equal(want) || ev.LeaseOwner != "w3" {
				t.Errorf("event %d: lease expires %v owner %q, want %v w3", id, ev.LeaseExpiresAt, ev.LeaseOwner, want)
			}
			if ledger := attempts(t, b, id); len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeRunning {
				t.Errorf("event %d ledger = %+v, want one running row", id, ledger)
			}
		}
		for what, s := range before {
			wantUnchanged(t, b, what+" event", s)
		}
	})

	run(t, setup, "AnExtendedLeaseOutlivesItsFirstTTL", func(t *testing.T, b *bundle[TX]) {
		receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		for range 3 {
			b.clock.Advance(ttl - time.Second)
			if lost := heartbeatMany(t, b, lease); len(lost) != 0 {
				t.Fatalf("a held lease was reported lost: %v", lost)
			}
		}
		if c := claim(t, b, "w2", 1); len(c) != 0 {
			t.Fatalf("w2 claimed %v from under a lease kept alive by heartbeats", c)
		}
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatalf("complete after heartbeats: %v", err)
		}
	})

	// Batches that share events, each naming them in another order, wait on
	// each other rather than deadlock: every store locks in id order (the
	// same lock serves completions and failures).
	run(t, setup, "OverlappingBatchesInAnyOrder", func(t *testing.T, b *bundle[TX]) {
		const events, batches, rounds = 300, 4, 10
		for i := range events {
			receive(t, b, "stripe", fmt.Sprint("evt_", i))
		}
		var leases []ferry.Lease
		for _, c := range claim(t, b, "w1", events) {
			leases = append(leases, c.Event.Lease())
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range batches {
			batch := slices.Clone(leases)
			if w%2 == 1 {
				slices.Reverse(batch)
			}
			wg.Go(func() {
				<-start
				for range rounds {
					lost, err := b.store.EventHeartbeatMany(b.ctx, &ferry.EventHeartbeatManyParams{Leases: batch, TTL: ttl})
					if err != nil || len(lost) != 0 {
						t.Errorf("batch %d: lost %d, %v", w, len(lost), err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
	})

	run(t, setup, "NoLeasesIsANoOp", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		claimOne(t, b, "w1")
		before := snap(t, b, id)
		b.clock.Advance(time.Second)
		if lost := heartbeatMany(t, b); len(lost) != 0 {
			t.Fatalf("lost = %v from no leases", lost)
		}
		wantUnchanged(t, b, "an unnamed event", before)
	})
}
