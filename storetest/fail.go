package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testFail checks EventFail: the dead rule and the backoff.
func testFail[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "BackoffThenRetry", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "downstream 500", RetryDelay: 10 * time.Second, MaxAttempts: 3})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("fail = %s, %v", state, err)
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if ev.LastError != "downstream 500" || !ev.NextAttemptAt.Equal(b.clock.Now().Add(10*time.Second)) || ev.LeaseOwner != "" {
			t.Errorf("failed event: error %q next %v owner %q", ev.LastError, ev.NextAttemptAt, ev.LeaseOwner)
		}
		ledger := attempts(t, b, id)
		if len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeFailed || ledger[0].Error != "downstream 500" || ledger[0].FinishedAt.IsZero() {
			t.Fatalf("ledger = %+v", ledger[0])
		}
	})

	run(t, setup, "DeadAfterMaxAttempts", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		for i := 1; i <= 3; i++ {
			lease := claimOne(t, b, "w1").Event.Lease()
			state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "boom", MaxAttempts: 3})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]ferry.State{true: ferry.StateDead, false: ferry.StatePending}[i == 3]; state != want {
				t.Fatalf("attempt %d: state %s, want %s", i, state, want)
			}
		}
		wantState(t, b, id, ferry.StateDead)
		wantOutcomes(t, b, id, ferry.OutcomeFailed, ferry.OutcomeFailed, ferry.OutcomeDead)
		if got := claim(t, b, "w1", 10); len(got) != 0 {
			t.Fatal("a dead event was claimed")
		}
	})

	run(t, setup, "DeadOnceOlderThanMaxAge", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		b.clock.Advance(72*time.Hour - ttl)
		lease := claimOne(t, b, "w1").Event.Lease()
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAge: 72 * time.Hour})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("younger than max age: %s, %v", state, err)
		}
		b.clock.Advance(ttl)
		lease = claimOne(t, b, "w1").Event.Lease()
		state, err = b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAge: 72 * time.Hour})
		if err != nil || state != ferry.StateDead {
			t.Fatalf("at max age: %s, %v", state, err)
		}
		wantState(t, b, id, ferry.StateDead)
	})

	run(t, setup, "PermanentErrorIsDeadAtOnce", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "404", Dead: true, MaxAttempts: 25})
		if err != nil || state != ferry.StateDead {
			t.Fatalf("fail = %s, %v", state, err)
		}
		wantOutcomes(t, b, id, ferry.OutcomeDead)
	})

	// A fail no handler ran in (NotRun) leaves a released ledger row, so
	// the replay's first claim still hears of the lapse before it; a dead
	// verdict a handler gave is an end, and the replay's claim does not.
	for _, way := range []string{"Fail", "FailMany"} {
		run(t, setup, "NotRunIsReleasedAndTheReplaySeesTheLapse"+way, func(t *testing.T, b *bundle[TX]) {
			notRun, ran := receive(t, b, "stripe", "evt_not_run"), receive(t, b, "stripe", "evt_ran")
			claim(t, b, "crashed", 2)
			b.clock.Advance(ttl)
			leases := map[int64]ferry.Lease{}
			for _, c := range claim(t, b, "w1", 2) {
				leases[c.Event.ID] = c.Event.Lease()
			}
			failures := []ferry.EventFailParams{
				{Lease: leases[notRun], Error: "not run: budget spent", Dead: true, NotRun: true},
				{Lease: leases[ran], Error: "404", Dead: true},
			}
			fail := b.store.EventFailMany
			if way == "Fail" {
				fail = func(ctx context.Context, p *ferry.EventFailManyParams) ([]ferry.State, error) {
					states := make([]ferry.State, len(p.Failures))
					for i := range p.Failures {
						var err error
						if states[i], err = b.store.EventFail(ctx, &p.Failures[i]); err != nil {
							return nil, err
						}
					}
					return states, nil
				}
			}
			if states, err := fail(b.ctx, &ferry.EventFailManyParams{Failures: failures}); err != nil || !slices.Equal(states, []ferry.State{ferry.StateDead, ferry.StateDead}) {
				t.Fatalf("%s = %v, %v; want both dead", way, states, err)
			}
			wantState(t, b, notRun, ferry.StateDead)
			wantOutcomes(t, b, notRun, ferry.OutcomeLeaseExpired, ferry.OutcomeReleased)
			if a := attempts(t, b, notRun); a[1].Error != "not run: budget spent" || !a[1].FinishedAt.Equal(b.clock.Now()) {
				t.Errorf("not-run row = %+v, want its error, closed now", a[1])
			}
			wantOutcomes(t, b, ran, ferry.OutcomeLeaseExpired, ferry.OutcomeDead)
			if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{notRun, ran}, Actor: "op"}); err != nil {
				t.Fatal(err)
			}
			replayed := claim(t, b, "w2", 2)
			if len(replayed) != 2 {
				t.Fatalf("claimed %d replayed events, want 2", len(replayed))
			}
			for _, c := range replayed {
				if want := c.Event.ID == notRun; c.PreviousUnfinished != want || c.Reclaimed {
					t.Errorf("replayed %s: previous unfinished %v reclaimed %v; want %v, false", c.Event.EventID, c.PreviousUnfinished, c.Reclaimed, want)
				}
			}
		})
	}

	t.Run("FailRules", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name   string
			params ferry.EventFailParams
			age    time.Duration // how long after its receipt the event is claimed and fails
			want   ferry.State
		}{
			{"Retry", ferry.EventFailParams{RetryDelay: time.Second}, 0, ferry.StatePending},
			{"RetryInBudget", ferry.EventFailParams{RetryDelay: time.Minute, MaxAttempts: 5}, 0, ferry.StatePending},
			{"Permanent", ferry.EventFailParams{Dead: true}, 0, ferry.StateDead},
			{"BudgetSpent", ferry.EventFailParams{MaxAttempts: 1}, 0, ferry.StateDead},
			{"BudgetLeft", ferry.EventFailParams{MaxAttempts: 2}, 0, ferry.StatePending},
			{"TooOld", ferry.EventFailParams{MaxAge: time.Hour}, time.Hour, ferry.StateDead},
			{"YoungEnough", ferry.EventFailParams{MaxAge: time.Hour}, 59 * time.Minute, ferry.StatePending},
			{"NotRunRetry", ferry.EventFailParams{RetryDelay: time.Second, NotRun: true}, 0, ferry.StatePending},
			{"NotRunDead", ferry.EventFailParams{Dead: true, NotRun: true}, 0, ferry.StateDead},
			{"JustYoungEnough", ferry.EventFailParams{MaxAge: time.Hour}, time.Hour - time.Second, ferry.StatePending},
		} {
			run(t, setup, tc.name, func(t *testing.T, b *bundle[TX]) {
				id := receive(t, b, "stripe", "evt_1")
				b.clock.Advance(tc.age)
				params := tc.params
				params.Lease, params.Error = claimOne(t, b, "w1").Event.Lease(), "boom"
				state, err := b.store.EventFail(b.ctx, &params)
				if err != nil || state != tc.want {
					t.Fatalf("fail = %s, %v; want %s", state, err, tc.want)
				}
				now := b.clock.Now()
				ev := wantState(t, b, id, tc.want)
				if ev.LastError != "boom" || ev.LeaseOwner != "" || !ev.LeaseExpiresAt.IsZero() {
					t.Errorf("failed event: error %q owner %q expiry %v", ev.LastError, ev.LeaseOwner, ev.LeaseExpiresAt)
				}
				outcome := map[ferry.State]ferry.Outcome{ferry.StatePending: ferry.OutcomeFailed, ferry.StateDead: ferry.OutcomeDead}[tc.want]
				if params.NotRun {
					outcome = ferry.OutcomeReleased
				}
				ledger := attempts(t, b, id)
				if len(ledger) != 1 || ledger[0].Outcome != outcome || ledger[0].Error != "boom" || !ledger[0].FinishedAt.Equal(now) {
					t.Fatalf("ledger = %+v, want one %s attempt finished now", ledger, outcome)
				}
				if tc.want != ferry.StatePending {
					return
				}
				if !ev.NextAttemptAt.Equal(now.Add(params.RetryDelay)) {
					t.Errorf("next attempt at %v, want %v", ev.NextAttemptAt, now.Add(params.RetryDelay))
				}
				b.clock.Advance(params.RetryDelay)
				next := claimOne(t, b, "w2")
				if next.Event.ID != id || next.Event.Attempt != 2 || next.PreviousUnfinished {
					t.Errorf("retry: event %d attempt %d previous unfinished %v", next.Event.ID, next.Event.Attempt, next.PreviousUnfinished)
				}
			})
		}
	})
}

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
