package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testLease checks the fence: heartbeat, complete and release hold only while the lease does.
func testLease[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "ExpiredLeaseIsReclaimed", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		first := claimOne(t, b, "w1")
		b.clock.Advance(ttl - time.Millisecond)
		if got := claim(t, b, "w2", 10); len(got) != 0 {
			t.Fatal("a living lease was taken")
		}
		b.clock.Advance(time.Millisecond)
		second := claimOne(t, b, "w2")
		if second.Event.ID != id || second.Event.Attempt != first.Event.Attempt+1 || second.Event.LeaseOwner != "w2" {
			t.Fatalf("reclaim = %+v", second.Event)
		}
		if !second.PreviousUnfinished || !second.Reclaimed {
			t.Errorf("reclaim: previous unfinished %v reclaimed %v, want both", second.PreviousUnfinished, second.Reclaimed)
		}
		ledger := attempts(t, b, id)
		if len(ledger) != 2 || ledger[0].Outcome != ferry.OutcomeLeaseExpired || !ledger[0].FinishedAt.Equal(b.clock.Now()) ||
			ledger[1].Outcome != ferry.OutcomeRunning || ledger[1].Worker != "w2" {
			t.Fatalf("ledger = %+v %+v", ledger[0], ledger[len(ledger)-1])
		}
	})

	run(t, setup, "DeadWorkersEventGoesBeforeNewerWork", func(t *testing.T, b *bundle[TX]) {
		orphan := receive(t, b, "stripe", "evt_orphan")
		claimOne(t, b, "dead-worker")
		b.clock.Advance(time.Second)
		for i := range 5 { // a backlog received after the orphan was claimed
			receive(t, b, "stripe", fmt.Sprint("evt_backlog_", i))
		}
		b.clock.Advance(ttl)
		if c := claimOne(t, b, "survivor"); c.Event.ID != orphan {
			t.Fatalf("claimed event %d first, want the dead worker's %d ahead of the newer backlog", c.Event.ID, orphan)
		}
	})

	// Among lapsed leases, too, the oldest due goes first.
	run(t, setup, "OldestLapsedLeaseFirst", func(t *testing.T, b *bundle[TX]) {
		first := receive(t, b, "stripe", "evt_1")
		b.clock.Advance(time.Second)
		receive(t, b, "stripe", "evt_2")
		claim(t, b, "dead-worker", 2)
		b.clock.Advance(ttl)
		if c := claimOne(t, b, "survivor"); c.Event.ID != first {
			t.Fatalf("claimed lapsed event %d first, want the oldest due %d", c.Event.ID, first)
		}
	})

	run(t, setup, "HeartbeatKeepsALivingWorker", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		c := claimOne(t, b, "w1")
		for range 6 { // 6 × ttl/2 = 3 × ttl: a slow handler on a living worker
			b.clock.Advance(ttl / 2)
			exp, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: c.Event.Lease(), TTL: ttl})
			if err != nil {
				t.Fatalf("heartbeat: %v", err)
			}
			if !exp.Equal(b.clock.Now().Add(ttl)) {
				t.Fatalf("heartbeat expiry %v, want %v", exp, b.clock.Now().Add(ttl))
			}
			if got := claim(t, b, "thief", 10); len(got) != 0 {
				t.Fatal("a heartbeated lease was taken")
			}
		}
		mustComplete(t, b, c.Event.Lease())
		ev := wantState(t, b, id, ferry.StateDone)
		if !ev.CompletedAt.Equal(b.clock.Now()) || ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
			t.Errorf("done event: completed %v owner %q expiry %v", ev.CompletedAt, ev.LeaseOwner, ev.LeaseExpiresAt)
		}
		wantOutcomes(t, b, id, ferry.OutcomeDone)
	})

	run(t, setup, "RobbedWorkerIsFenced", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		zombie := claimOne(t, b, "zombie").Event.Lease()
		b.clock.Advance(ttl)
		claimOne(t, b, "w2")
		before, ledgerBefore := get(t, b, id), attempts(t, b, id)

		_, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: zombie, TTL: ttl})
		wantLeaseLost(t, "heartbeat", err)
		wantLeaseLost(t, "complete", b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: zombie}))
		_, err = b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: zombie, Error: "late", Dead: true})
		wantLeaseLost(t, "fail", err)
		wantLeaseLost(t, "release", b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: zombie}))
		err = b.store.InTx(b.ctx, func(tx TX) error {
			return b.store.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: zombie})
		})
		wantLeaseLost(t, "complete in tx", err)

		if after := get(t, b, id); !reflect.DeepEqual(before, after) {
			t.Errorf("a fenced write changed the event:\nbefore %+v\nafter  %+v", before, after)
		}
		if after := attempts(t, b, id); !reflect.DeepEqual(ledgerBefore, after) {
			t.Errorf("a fenced write changed the ledger")
		}
	})

	run(t, setup, "ExpiredLeaseIsNotHeldEvenUnclaimed", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		b.clock.Advance(ttl)
		_, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: ttl})
		wantLeaseLost(t, "heartbeat after expiry", err)
		wantLeaseLost(t, "complete after expiry", b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}))
		_, err = b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "late", MaxAttempts: 5})
		wantLeaseLost(t, "fail after expiry", err)
		wantLeaseLost(t, "release after expiry", b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: lease}))
		wantState(t, b, id, ferry.StateInProgress)
	})

	run(t, setup, "CompleteOnce", func(t *testing.T, b *bundle[TX]) {
		receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		mustComplete(t, b, lease)
		wantLeaseLost(t, "second complete", b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}))
		if got := claim(t, b, "w2", 10); len(got) != 0 {
			t.Fatal("a done event was claimed")
		}
	})

	run(t, setup, "ReleaseIsDueAtOnce", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		b.clock.Advance(time.Second)
		if err := b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if !ev.NextAttemptAt.Equal(b.clock.Now()) || ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
			t.Errorf("released: next %v owner %q expiry %v", ev.NextAttemptAt, ev.LeaseOwner, ev.LeaseExpiresAt)
		}
		next := claimOne(t, b, "w2")
		if next.PreviousUnfinished || next.Event.Attempt != 2 {
			t.Errorf("after release: attempt %d previous unfinished %v", next.Event.Attempt, next.PreviousUnfinished)
		}
		wantOutcomes(t, b, id, ferry.OutcomeReleased, ferry.OutcomeRunning)
	})

	run(t, setup, "HoldMovesLostLeaseToUnknown", func(t *testing.T, b *bundle[TX]) {
		held := receive(t, b, "payments", "evt_1")
		retried := receive(t, b, "stripe", "evt_1")
		claim(t, b, "w1", 10)
		b.clock.Advance(ttl)
		got, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w2", Limit: 10, TTL: ttl, HoldSources: []string{"payments"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Event.ID != retried {
			t.Fatalf("claimed %d events, want only the retry source's", len(got))
		}
		ev := wantState(t, b, held, ferry.StateUnknown)
		if ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
			t.Errorf("unknown event keeps a lease: %q %v", ev.LeaseOwner, ev.LeaseExpiresAt)
		}
		wantOutcomes(t, b, held, ferry.OutcomeLeaseExpired)
		b.clock.Advance(ttl)
		if got := claim(t, b, "w3", 10); len(got) != 1 || got[0].Event.ID != retried {
			t.Fatalf("an unknown event was claimed")
		}
	})

	run(t, setup, "HeartbeatAndCompleteAreStored", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		b.clock.Advance(ttl - time.Second)
		exp, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if ev := get(t, b, id); !ev.LeaseExpiresAt.Equal(exp) || !exp.Equal(b.clock.Now().Add(ttl)) {
			t.Errorf("stored lease expiry %v, heartbeat said %v, want %v", ev.LeaseExpiresAt, exp, b.clock.Now().Add(ttl))
		}
		b.clock.Advance(time.Second)
		mustComplete(t, b, lease)
		ledger := attempts(t, b, id)
		if len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeDone || !ledger[0].FinishedAt.Equal(b.clock.Now()) || ledger[0].Error != "" {
			t.Fatalf("ledger = %+v, want one done attempt finished now", ledger)
		}
	})
}
