package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testResolve checks EventResolve: dead and unknown events close as done
// without running again, by whom and when, and nothing else is touched.
func testResolve[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	// kill makes a fresh event dead after one failed attempt.
	kill := func(t *testing.T, b *bundle[TX], eventID string) int64 {
		t.Helper()
		id := receive(t, b, "stripe", eventID)
		lease := claimOne(t, b, "w1").Event.Lease()
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Dead: true, Error: "poison"}); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, id, ferry.StateDead)
		return id
	}
	resolve := func(t *testing.T, b *bundle[TX], actor string, ids ...int64) int {
		t.Helper()
		n, err := b.store.EventResolve(b.ctx, &ferry.EventResolveParams{IDs: ids, Actor: actor})
		if err != nil {
			t.Fatalf("EventResolve(%v): %v", ids, err)
		}
		return n
	}

	run(t, setup, "DeadAndUnknownBecomeDoneWithoutRunning", func(t *testing.T, b *bundle[TX]) {
		dead := kill(t, b, "dead")
		unknown := makeUnknown(t, b, "unknown")
		before := map[int64][]*ferry.Attempt{dead: attempts(t, b, dead), unknown: attempts(t, b, unknown)}
		b.clock.Advance(time.Minute)
		if n := resolve(t, b, "alice", dead, unknown); n != 2 {
			t.Fatalf("resolved %d, want 2", n)
		}
		for _, id := range []int64{dead, unknown} {
			ev := wantState(t, b, id, ferry.StateDone)
			if !ev.CompletedAt.Equal(b.clock.Now()) || ev.LeaseOwner != "" {
				t.Errorf("event %d resolved: completed at %v (want %v), lease owner %q", id, ev.CompletedAt, b.clock.Now(), ev.LeaseOwner)
			}
			// The ledger says what ran; resolving ran nothing.
			after := attempts(t, b, id)
			if len(after) != len(before[id]) {
				t.Fatalf("event %d ledger: %d rows after, %d before", id, len(after), len(before[id]))
			}
			for i := range after {
				if after[i].Attempt != before[id][i].Attempt || after[i].Outcome != before[id][i].Outcome || after[i].Error != before[id][i].Error {
					t.Errorf("event %d ledger row %d = %+v, was %+v", id, i, after[i], before[id][i])
				}
			}
			actions, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: id})
			if err != nil || len(actions) != 1 || actions[0].Action != ferry.ActionResolve || actions[0].Actor != "alice" || !actions[0].At.Equal(b.clock.Now()) {
				t.Errorf("actions of %d = %+v, %v; want one resolve by alice at %v", id, actions, err, b.clock.Now())
			}
		}
		// Nobody claims a resolved event.
		if claims := claim(t, b, "w3", 10); len(claims) != 0 {
			t.Errorf("claimed %d resolved events", len(claims))
		}
		// Stats, which the alerts read, count them done.
		stats, err := b.store.EventStats(b.ctx, &ferry.EventStatsParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(stats.Sources) != 1 || stats.Sources[0].States[ferry.StateDead] != 0 || stats.Sources[0].States[ferry.StateUnknown] != 0 || stats.Sources[0].States[ferry.StateDone] != 2 {
			t.Errorf("stats after resolve = %+v, want 2 done, no dead or unknown", stats.Sources)
		}
	})

	run(t, setup, "LeavesEveryOtherState", func(t *testing.T, b *bundle[TX]) {
		done := receive(t, b, "stripe", "done")
		mustComplete(t, b, claimOne(t, b, "w1").Event.Lease())
		running := receive(t, b, "stripe", "running")
		lease := claimOne(t, b, "w1").Event.Lease()
		dead := kill(t, b, "dead")
		pending := receive(t, b, "stripe", "pending")
		if n := resolve(t, b, "alice", done, running, pending, dead, 1<<40); n != 1 {
			t.Fatalf("resolved %d, want 1 (only the dead one)", n)
		}
		wantState(t, b, dead, ferry.StateDone)
		wantState(t, b, pending, ferry.StatePending)
		wantState(t, b, running, ferry.StateInProgress)
		// The lease still holds: its worker completes it as usual.
		mustComplete(t, b, lease)
		for _, id := range []int64{done, running, pending} {
			if actions, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: id}); err != nil || len(actions) != 0 {
				t.Errorf("actions of untouched event %d = %+v, %v; want none", id, actions, err)
			}
		}
		// A second resolve finds the event done: nothing changes, nothing is recorded.
		if n := resolve(t, b, "bob", dead); n != 0 {
			t.Errorf("resolving a resolved event = %d, want 0", n)
		}
		if actions, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: dead}); err != nil || len(actions) != 1 || actions[0].Actor != "alice" {
			t.Errorf("actions after a second resolve = %+v, %v; want alice's alone", actions, err)
		}
	})

	// A requeue that took the event first wins: the resolve finds it pending.
	run(t, setup, "RequeuedFirstIsLeft", func(t *testing.T, b *bundle[TX]) {
		dead := kill(t, b, "dead")
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{dead}, Actor: "bob"}); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		c := claimOne(t, b, "w2")
		if n := resolve(t, b, "alice", dead); n != 0 {
			t.Fatalf("resolved a claimed event: %d", n)
		}
		mustComplete(t, b, c.Event.Lease())
	})

	run(t, setup, "PurgedAtRetentionLikeAnyDone", func(t *testing.T, b *bundle[TX]) {
		dead := kill(t, b, "dead")
		resolve(t, b, "alice", dead)
		purgeAtRetention(t, b, "stripe", dead)
		// Its ledger goes with it: none is left to outlive retention.
		if attempts, err := b.store.AttemptList(b.ctx, &ferry.AttemptListParams{ID: dead}); err != nil || len(attempts) != 0 {
			t.Errorf("purged resolved event's attempts = %+v, %v; want none", attempts, err)
		}
	})

	run(t, setup, "InvalidParams", func(t *testing.T, b *bundle[TX]) {
		dead := kill(t, b, "dead")
		for name, p := range map[string]*ferry.EventResolveParams{
			"NoActor":  {IDs: []int64{dead}},
			"BadActor": {IDs: []int64{dead}, Actor: "a\x00b"},
			"NoIDs":    {Actor: "alice"},
			"BadID":    {IDs: []int64{dead, 0}, Actor: "alice"},
		} {
			if _, err := b.store.EventResolve(b.ctx, p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("%s: err = %v, want ErrInvalidParams", name, err)
			}
		}
		wantState(t, b, dead, ferry.StateDead)
	})
}
