package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testFailMany checks EventFailMany: each failure whose lease holds is closed
// by EventFail's rule with its own fields; the others get "" and are left
// alone.
func testFailMany[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "EachByItsOwnRuleLostAreUntouched", func(t *testing.T, b *bundle[TX]) {
		retryID := receive(t, b, "stripe", "evt_retry")
		permanentID := receive(t, b, "stripe", "evt_permanent")
		spentID := receive(t, b, "stripe", "evt_spent")
		oldID := receive(t, b, "stripe", "evt_old")
		expiredID := receive(t, b, "github", "evt_expired")
		if c := claim(t, b, "w0", 1, "github"); len(c) != 1 {
			t.Fatal("no github claim")
		} else {
			b.clock.Advance(time.Hour)
			before := snap(t, b, expiredID)
			expired := c[0].Event.Lease()
			claims := claim(t, b, "w1", 4, "stripe")
			if len(claims) != 4 {
				t.Fatalf("claimed %d, want 4", len(claims))
			}
			byID := map[int64]ferry.Lease{}
			for _, cl := range claims {
				byID[cl.Event.ID] = cl.Event.Lease()
			}
			states, err := b.store.EventFailMany(b.ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{
				{Lease: byID[retryID], Error: "downstream 500", RetryDelay: 10 * time.Second, MaxAttempts: 3,
					Response: ferry.AttemptResponse{HTTPStatus: 500, Body: "upstream down"}},
				{Lease: expired, Error: "too late"},
				{Lease: byID[permanentID], Error: "404", Dead: true, MaxAttempts: 25},
				{Lease: byID[spentID], Error: "boom", MaxAttempts: 1},
				{Lease: byID[oldID], Error: "old", MaxAge: time.Hour},
			}})
			if err != nil {
				t.Fatal(err)
			}
			want := []ferry.State{ferry.StatePending, "", ferry.StateDead, ferry.StateDead, ferry.StateDead}
			if !slices.Equal(states, want) {
				t.Fatalf("states = %v, want %v", states, want)
			}
			wantUnchanged(t, b, "an expired lease's event", before)
		}
		ev := wantState(t, b, retryID, ferry.StatePending)
		if ev.LastError != "downstream 500" || !ev.NextAttemptAt.Equal(b.clock.Now().Add(10*time.Second)) || ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
			t.Errorf("retried event: error %q next %v owner %q expiry %v", ev.LastError, ev.NextAttemptAt, ev.LeaseOwner, ev.LeaseExpiresAt)
		}
		for id, wantErr := range map[int64]string{retryID: "downstream 500", permanentID: "404", spentID: "boom", oldID: "old"} {
			ledger := attempts(t, b, id)
			wantOutcome := ferry.OutcomeDead
			if id == retryID {
				wantOutcome = ferry.OutcomeFailed
			}
			if len(ledger) != 1 || ledger[0].Outcome != wantOutcome || ledger[0].Error != wantErr || !ledger[0].FinishedAt.Equal(b.clock.Now()) {
				t.Errorf("event %d ledger = %+v, want one %s row closed now with %q", id, ledger[0], wantOutcome, wantErr)
			}
		}
		if a := attempts(t, b, retryID)[0]; a.HTTPStatus != 500 || a.Response != "upstream down" {
			t.Errorf("retried event's ledger keeps response %d %q, want 500 %q", a.HTTPStatus, a.Response, "upstream down")
		}
		if a := attempts(t, b, spentID)[0]; a.HTTPStatus != 0 || a.Response != "" {
			t.Errorf("a failure without a response recorded %d %q", a.HTTPStatus, a.Response)
		}
		for _, id := range []int64{permanentID, spentID, oldID} {
			if ev := wantState(t, b, id, ferry.StateDead); ev.LastError == "" {
				t.Errorf("dead event %d has no last error", id)
			}
		}
	})

	run(t, setup, "NoFailuresIsANoOp", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		claimOne(t, b, "w1")
		before := snap(t, b, id)
		states, err := b.store.EventFailMany(b.ctx, &ferry.EventFailManyParams{})
		if err != nil || len(states) != 0 {
			t.Fatalf("fail many of nothing = %v, %v", states, err)
		}
		wantUnchanged(t, b, "an unnamed event", before)
	})
}
