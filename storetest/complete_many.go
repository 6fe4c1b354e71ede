package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// completeMany calls EventCompleteMany and fails the test on an error.
func completeMany[TX any](t *testing.T, b *bundle[TX], leases ...ferry.Lease) []ferry.Lease {
	t.Helper()
	lost, err := b.store.EventCompleteMany(b.ctx, &ferry.EventCompleteManyParams{Leases: leases})
	if err != nil {
		t.Fatalf("EventCompleteMany(%v): %v", leases, err)
	}
	return lost
}

// snapshot is an event and its ledger, to prove a write changed neither.
type snapshot struct {
	event  *ferry.Event
	ledger []*ferry.Attempt
}

func snap[TX any](t *testing.T, b *bundle[TX], id int64) snapshot {
	t.Helper()
	return snapshot{get(t, b, id), attempts(t, b, id)}
}

func wantUnchanged[TX any](t *testing.T, b *bundle[TX], what string, before snapshot) {
	t.Helper()
	if after := snap(t, b, before.event.ID); !reflect.DeepEqual(before, after) {
		t.Errorf("%s changed:\nbefore %+v %+v\nafter  %+v %+v", what, before.event, before.ledger, after.event, after.ledger)
	}
}

// mixedLeases are the leases a batch write must tell apart: robbed (lapsed
// and reclaimed by another worker), expired (lapsed, not reclaimed), done
// (completed already), held and other (both live, claimed by w3) and stale
// (an attempt of held's event that never was).
type mixedLeases struct {
	robbed, expired, done, held, other, stale ferry.Lease
}

// snapLost snapshots the events of the leases a batch write must leave
// alone: robbed, expired and done.
func snapLost[TX any](t *testing.T, b *bundle[TX], m mixedLeases) map[string]snapshot {
	t.Helper()
	return map[string]snapshot{"robbed": snap(t, b, m.robbed.ID), "expired": snap(t, b, m.expired.ID), "done": snap(t, b, m.done.ID)}
}

func wantAllUnchanged[TX any](t *testing.T, b *bundle[TX], before map[string]snapshot) {
	t.Helper()
	for what, s := range before {
		wantUnchanged(t, b, what+" event", s)
	}
}

func claimMixedLeases[TX any](t *testing.T, b *bundle[TX]) mixedLeases {
	t.Helper()
	robbedID := receive(t, b, "stripe", "evt_robbed")
	expiredID := receive(t, b, "stripe", "evt_expired")
	doneID := receive(t, b, "stripe", "evt_done")
	first := claim(t, b, "w1", 3, "stripe")
	if len(first) != 3 {
		t.Fatalf("claimed %d, want 3", len(first))
	}
	m := mixedLeases{robbed: first[0].Event.Lease(), expired: first[1].Event.Lease(), done: first[2].Event.Lease()}
	if m.robbed.ID != robbedID || m.expired.ID != expiredID || m.done.ID != doneID {
		t.Fatalf("claimed out of order: %v %v %v", m.robbed, m.expired, m.done)
	}
	mustComplete(t, b, m.done)
	b.clock.Advance(ttl) // w1's two other leases lapse
	if c := claim(t, b, "w2", 1, "stripe"); len(c) != 1 || c[0].Event.ID != robbedID {
		t.Fatalf("reclaim took %v, want event %d", c, robbedID)
	}
	heldID := receive(t, b, "github", "evt_held")
	otherID := receive(t, b, "github", "evt_other")
	fresh := claim(t, b, "w3", 2, "github")
	m.held, m.other = fresh[0].Event.Lease(), fresh[1].Event.Lease()
	if m.held.ID != heldID || m.other.ID != otherID {
		t.Fatalf("claimed out of order: %v %v", m.held, m.other)
	}
	m.stale = ferry.Lease{ID: heldID, Attempt: m.held.Attempt + 1} // an attempt that never was
	return m
}

func testCompleteMany[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "HeldAreDoneLostAreReportedAndUntouched", func(t *testing.T, b *bundle[TX]) {
		m := claimMixedLeases(t, b)
		robbed, expired, done, held, other, stale := m.robbed, m.expired, m.done, m.held, m.other, m.stale
		b.clock.Advance(time.Second)
		before := snapLost(t, b, m)
		lost := completeMany(t, b, held, robbed, expired, other, done, stale)
		if want := []ferry.Lease{robbed, expired, done, stale}; !slices.Equal(lost, want) {
			t.Fatalf("lost = %v, want %v (in the order named)", lost, want)
		}
		for _, id := range []int64{held.ID, other.ID} {
			ev := wantState(t, b, id, ferry.StateDone)
			if !ev.CompletedAt.Equal(b.clock.Now()) || ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
				t.Errorf("event %d: completed %v owner %q expiry %v", id, ev.CompletedAt, ev.LeaseOwner, ev.LeaseExpiresAt)
			}
			ledger := attempts(t, b, id)
			if len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeDone || !ledger[0].FinishedAt.Equal(b.clock.Now()) {
				t.Errorf("event %d ledger = %+v, want one done row closed now", id, ledger)
			}
		}
		wantAllUnchanged(t, b, before)
		wantState(t, b, robbed.ID, ferry.StateInProgress) // still w2's
	})

	run(t, setup, "NoLeasesIsANoOp", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		claimOne(t, b, "w1")
		before := snap(t, b, id)
		if lost := completeMany(t, b); len(lost) != 0 {
			t.Fatalf("lost = %v from no leases", lost)
		}
		if lost := completeMany(t, b, []ferry.Lease{}...); len(lost) != 0 {
			t.Fatalf("lost = %v from an empty slice", lost)
		}
		wantUnchanged(t, b, "an unnamed event", before)
	})

	run(t, setup, "ALeaseNamedTwiceCompletesOnce", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		lostID := receive(t, b, "stripe", "evt_2")
		claims := claim(t, b, "w1", 2)
		lease, gone := claims[0].Event.Lease(), claims[1].Event.Lease()
		mustComplete(t, b, gone)
		before := snap(t, b, lostID)
		lost := completeMany(t, b, lease, gone, lease, gone, lease)
		if !slices.Equal(lost, []ferry.Lease{gone}) {
			t.Fatalf("lost = %v, want %v once", lost, gone)
		}
		wantState(t, b, id, ferry.StateDone)
		wantOutcomes(t, b, id, ferry.OutcomeDone)
		wantUnchanged(t, b, "the lost event", before)
		// Once done, the lease is lost to a second batch like any other.
		if lost := completeMany(t, b, lease); !slices.Equal(lost, []ferry.Lease{lease}) {
			t.Fatalf("second batch lost = %v, want %v", lost, lease)
		}
	})

	run(t, setup, "EveryLeaseLostChangesNothing", func(t *testing.T, b *bundle[TX]) {
		var leases []ferry.Lease
		var before []snapshot
		for i := range 3 {
			receive(t, b, "stripe", fmt.Sprint("evt_", i))
		}
		for _, c := range claim(t, b, "w1", 3) {
			leases = append(leases, c.Event.Lease())
		}
		b.clock.Advance(ttl)
		for _, l := range leases {
			before = append(before, snap(t, b, l.ID))
		}
		if lost := completeMany(t, b, leases...); !slices.Equal(lost, leases) {
			t.Fatalf("lost = %v, want all of %v", lost, leases)
		}
		for _, s := range before {
			wantUnchanged(t, b, "an expired event", s)
		}
	})

	// Completers working disjoint batches, half of whose leases have lapsed,
	// race a claimer taking the lapsed events back (and completing them in
	// batches too). The lapsed leases are lost whoever wins, the living ones
	// are done, and the claimer gets every lapsed event and none other.
	run(t, setup, "ConcurrentBatchesAndAReclaimer", func(t *testing.T, b *bundle[TX]) {
		const perGroup, completers = 60, 4
		var receipts sync.WaitGroup
		for w := range completers { // concurrent receipts share commits
			receipts.Go(func() {
				for i := w; i < 2*perGroup; i += completers {
					if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: fmt.Sprint("evt_", i)}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		receipts.Wait()
		if t.Failed() {
			return
		}
		lapsing := claim(t, b, "w1", perGroup)
		b.clock.Advance(ttl / 2)
		living := claim(t, b, "w1", perGroup)
		b.clock.Advance(ttl / 2) // lapsing's leases end now; living's hold
		if len(lapsing) != perGroup || len(living) != perGroup {
			t.Fatalf("claimed %d and %d, want %d each", len(lapsing), len(living), perGroup)
		}
		isLapsing := map[ferry.Lease]bool{}
		for _, c := range lapsing {
			isLapsing[c.Event.Lease()] = true
		}

		var wg sync.WaitGroup
		lostBy := make([][]ferry.Lease, completers)
		for w := range completers {
			var batch []ferry.Lease
			for i := w; i < perGroup; i += completers {
				batch = append(batch, lapsing[i].Event.Lease(), living[i].Event.Lease())
			}
			wg.Go(func() {
				lost, err := b.store.EventCompleteMany(b.ctx, &ferry.EventCompleteManyParams{Leases: batch})
				if err != nil {
					t.Errorf("completer %d: %v", w, err)
				}
				lostBy[w] = lost
			})
		}
		var reclaimed []int64
		wg.Go(func() {
			for {
				claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "reclaimer", Limit: 10, TTL: ttl})
				if err != nil {
					t.Errorf("reclaim: %v", err)
					return
				}
				if len(claims) == 0 {
					return
				}
				leases := make([]ferry.Lease, len(claims))
				for i, c := range claims {
					leases[i] = c.Event.Lease()
					reclaimed = append(reclaimed, c.Event.ID)
				}
				lost, err := b.store.EventCompleteMany(b.ctx, &ferry.EventCompleteManyParams{Leases: leases})
				if err != nil || len(lost) != 0 {
					t.Errorf("reclaimer's own batch: lost %v, %v", lost, err)
					return
				}
			}
		})
		wg.Wait()
		if t.Failed() {
			return
		}

		lostCount := 0
		for w, lost := range lostBy {
			for _, l := range lost {
				if !isLapsing[l] {
					t.Errorf("completer %d lost living lease %v", w, l)
				}
			}
			lostCount += len(lost)
		}
		if lostCount != perGroup {
			t.Errorf("%d leases lost, want the %d lapsed ones", lostCount, perGroup)
		}
		if len(reclaimed) != perGroup {
			t.Errorf("reclaimer took %d events, want the %d lapsed ones", len(reclaimed), perGroup)
		}
		for _, c := range lapsing {
			wantOutcomes(t, b, c.Event.ID, ferry.OutcomeLeaseExpired, ferry.OutcomeDone)
		}
		for _, c := range living {
			wantOutcomes(t, b, c.Event.ID, ferry.OutcomeDone)
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateDone}, Limit: 1000})
		if err != nil || len(page.Events) != 2*perGroup {
			t.Fatalf("%d events done, want %d (%v)", len(page.Events), 2*perGroup, err)
		}
	})
}
