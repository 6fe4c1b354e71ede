package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testExtra holds the rules the postgres and sqlite packages each checked on
// their own before the contract existed, and that the other tests here do
// not pin down: the edges of receipt, fail, requeue, list and purge.
func testExtra[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], newEffects func(*testing.T, ferry.TxStore[TX]) Effects[TX]) {
	t.Run("RedeliveryKeepsTheFirstReceipt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start := b.clock.Now()
		id := receive(t, b, "stripe", "evt_1")
		if id == 0 {
			t.Fatal("a new event has id 0")
		}
		b.clock.Advance(time.Minute)
		for _, payload := range []string{`{"id":"evt_1"}`, `{"id":"evt_1","v":2}`} {
			if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if ev.Deliveries != 3 || ev.Conflicts != 1 {
			t.Errorf("deliveries %d conflicts %d, want 3 and 1", ev.Deliveries, ev.Conflicts)
		}
		// A redelivery counts, but neither moves the first receipt nor
		// makes the event due again.
		if !ev.FirstDeliveredAt.Equal(start) || !ev.NextAttemptAt.Equal(start) || !ev.LastDeliveredAt.Equal(start.Add(time.Minute)) {
			t.Errorf("first %v next %v last %v, want %v, %v and a minute later", ev.FirstDeliveredAt, ev.NextAttemptAt, ev.LastDeliveredAt, start, start)
		}
		for name, at := range map[string]time.Time{"first": ev.FirstDeliveredAt, "last": ev.LastDeliveredAt, "next": ev.NextAttemptAt} {
			if at.Location() != time.UTC {
				t.Errorf("%s delivered at %v is not in UTC", name, at)
			}
		}
		conflicts, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id})
		if err != nil || len(conflicts) != 1 || conflicts[0].EventID != id {
			t.Fatalf("conflicts = %+v, %v; want one of event %d", conflicts, err, id)
		}
	})

	t.Run("EmptyPayloadNoHeaders", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e"})
		if err != nil {
			t.Fatal(err)
		}
		ev := get(t, b, res.ID)
		if len(ev.Payload) != 0 || ev.Headers != nil || len(ev.PayloadSHA256) != 32 {
			t.Errorf("event = %+v, want empty payload, nil headers, a hash", ev)
		}
	})

	t.Run("EmptyInbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if got := claim(t, b, "w1", 10); len(got) != 0 {
			t.Fatalf("claimed %d events from an empty inbox", len(got))
		}
		for _, id := range []int64{1, 1000} {
			if got := attempts(t, b, id); len(got) != 0 {
				t.Errorf("ledger of unknown event %d = %+v", id, got)
			}
			if got, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id}); err != nil || len(got) != 0 {
				t.Errorf("conflicts of unknown event %d = %+v, %v; want none", id, got, err)
			}
		}
	})

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
			{"JustYoungEnough", ferry.EventFailParams{MaxAge: time.Hour}, time.Hour - time.Second, ferry.StatePending},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
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

	t.Run("RequeueRestartsBudgetAndAge", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "stripe", "evt_1")
		fail := func() ferry.State {
			lease := claimOne(t, b, "w1").Event.Lease()
			state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: 2, MaxAge: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return state
		}
		if s1, s2 := fail(), fail(); s1 != ferry.StatePending || s2 != ferry.StateDead {
			t.Fatalf("states = %s, %s; want pending then dead", s1, s2)
		}
		b.clock.Advance(2 * time.Hour) // older than MaxAge since the first delivery
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{id}}); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		if s := fail(); s != ferry.StatePending {
			t.Errorf("first attempt after requeue went %s, want pending: budget and age restart", s)
		}
		if ev := get(t, b, id); ev.Attempt != 3 {
			t.Errorf("attempt = %d, want 3: the counter never goes down", ev.Attempt)
		}
	})

	t.Run("BulkRequeueLeavesDone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		done := receive(t, b, "stripe", "done")
		dead := receive(t, b, "stripe", "dead")
		receive(t, b, "stripe", "pending")
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: claimOne(t, b, "w1").Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: claimOne(t, b, "w1").Event.Lease(), MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Second)
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Source: "stripe"})
		if err != nil || n != 1 {
			t.Fatalf("bulk requeue = %d, %v; want 1 (the dead event)", n, err)
		}
		wantState(t, b, done, ferry.StateDone)
		ev := wantState(t, b, dead, ferry.StatePending)
		if ev.Attempt != 1 || !ev.RequeuedAt.Equal(b.clock.Now()) {
			t.Errorf("bulk requeued: attempt %d at %v", ev.Attempt, ev.RequeuedAt)
		}
	})

	t.Run("HeartbeatAndCompleteAreStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
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
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		ledger := attempts(t, b, id)
		if len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeDone || !ledger[0].FinishedAt.Equal(b.clock.Now()) || ledger[0].Error != "" {
			t.Fatalf("ledger = %+v, want one done attempt finished now", ledger)
		}
	})

	t.Run("FencedTransactionRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		fx := newEffects(t, b.store)
		work := func(lease ferry.Lease, key string) error {
			return b.store.InTx(b.ctx, func(tx TX) error {
				if err := fx.Insert(b.ctx, tx, key); err != nil {
					return err
				}
				return b.store.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: lease})
			})
		}
		count := func(key string) int {
			t.Helper()
			n, err := fx.Count(b.ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}

		// A lease for an attempt that was never claimed holds nothing.
		first := receive(t, b, "stripe", "first")
		lease := claimOne(t, b, "w1").Event.Lease()
		wantLeaseLost(t, "complete with a later attempt", work(ferry.Lease{ID: lease.ID, Attempt: lease.Attempt + 1}, "first"))
		if n := count("first"); n != 0 {
			t.Fatalf("a fenced-out handler's effect was committed: %d rows", n)
		}
		if err := work(lease, "first"); err != nil {
			t.Fatal(err)
		}
		if n := count("first"); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
		wantState(t, b, first, ferry.StateDone)

		// An expired lease holds nothing, even before anyone claims again,
		// and a refused write leaves the attempt running.
		second := receive(t, b, "stripe", "second")
		lease = claimOne(t, b, "w1").Event.Lease()
		b.clock.Advance(ttl)
		wantLeaseLost(t, "complete in tx after expiry", work(lease, "second"))
		wantLeaseLost(t, "complete after expiry", b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}))
		if n := count("second"); n != 0 {
			t.Fatalf("an expired handler's effect was committed: %d rows", n)
		}
		wantState(t, b, second, ferry.StateInProgress)
		wantOutcomes(t, b, second, ferry.OutcomeRunning)
	})

	t.Run("HoldWithinASourceFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := receive(t, b, "payments", "evt_1")
		claimOne(t, b, "w1")
		retried := receive(t, b, "stripe", "evt_1")
		claimOne(t, b, "w1")
		b.clock.Advance(ttl)
		// Holding the only source asked for claims nothing, but still
		// settles its lapsed attempt.
		params := &ferry.EventClaimManyParams{Owner: "w2", Limit: 10, TTL: ttl, Sources: []string{"payments"}, HoldSources: []string{"payments"}}
		if got, err := b.store.EventClaimMany(b.ctx, params); err != nil || len(got) != 0 {
			t.Fatalf("claim = %d events, %v; want none", len(got), err)
		}
		wantState(t, b, held, ferry.StateUnknown)
		if ledger := attempts(t, b, held); len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeLeaseExpired || !ledger[0].FinishedAt.Equal(b.clock.Now()) {
			t.Errorf("held ledger = %+v, want one lease_expired attempt finished now", ledger)
		}
		if c := claimOne(t, b, "w2"); c.Event.ID != retried || !c.PreviousUnfinished {
			t.Errorf("claim = event %d previous unfinished %v, want %d with an unfinished attempt", c.Event.ID, c.PreviousUnfinished, retried)
		}
	})

	t.Run("ListPagesAndFilters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		start := b.clock.Now()
		var ids []int64
		for i := range 5 {
			ids = append(ids, receive(t, b, "s", fmt.Sprintf("evt_%d", i)))
			b.clock.Advance(time.Second)
		}
		receive(t, b, "other", "evt%_x")
		claimOne(t, b, "w") // ids[0] goes in_progress
		list := func(p ferry.EventListParams) *ferry.EventListResult {
			t.Helper()
			res, err := b.store.EventList(b.ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		idsOf := func(res *ferry.EventListResult) (got []int64) {
			for _, ev := range res.Events {
				got = append(got, ev.ID)
			}
			return got
		}

		// A full page points past its last event; a short one ends the list.
		page1 := list(ferry.EventListParams{Source: "s", Limit: 3})
		if got, want := idsOf(page1), []int64{ids[4], ids[3], ids[2]}; !slices.Equal(got, want) || page1.NextBefore != ids[2] {
			t.Fatalf("page 1 = %v next %d, want %v next %d", got, page1.NextBefore, want, ids[2])
		}
		page2 := list(ferry.EventListParams{Source: "s", Limit: 3, Before: page1.NextBefore})
		if got, want := idsOf(page2), []int64{ids[1], ids[0]}; !slices.Equal(got, want) || page2.NextBefore != 0 {
			t.Fatalf("page 2 = %v next %d, want %v next 0", got, page2.NextBefore, want)
		}
		if res := list(ferry.EventListParams{States: []ferry.State{ferry.StateInProgress}}); len(res.Events) != 1 || res.Events[0].ID != ids[0] {
			t.Fatalf("in_progress = %v, want [%d]", idsOf(res), ids[0])
		}
		if res := list(ferry.EventListParams{States: []ferry.State{ferry.StatePending, ferry.StateInProgress}}); len(res.Events) != 6 {
			t.Fatalf("pending or in_progress = %v, want all 6", idsOf(res))
		}
		// LIKE's wildcards are searched for literally.
		if res := list(ferry.EventListParams{EventIDContains: "%_"}); len(res.Events) != 1 || res.Events[0].Source != "other" {
			t.Fatalf("literal substring = %v, want only other's event", idsOf(res))
		}
		// Since takes the events received at that instant too.
		if res := list(ferry.EventListParams{Since: start.Add(3 * time.Second)}); len(res.Events) != 3 {
			t.Fatalf("since = %v, want 3 events", idsOf(res))
		}
	})

	t.Run("PurgeAtRetentionWithConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "s", "e")
		if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e", Payload: []byte("different")}); err != nil {
			t.Fatal(err)
		}
		pending := receive(t, b, "s", "pending")
		lease := claimOne(t, b, "w").Event.Lease()
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		params := &ferry.EventPurgeParams{Source: "s", Retention: 24 * time.Hour, ReplayWindow: time.Hour}
		b.clock.Advance(24*time.Hour - time.Second)
		if n, err := b.store.EventPurge(b.ctx, params); err != nil || n != 0 {
			t.Fatalf("purge a second early = %d, %v; want 0", n, err)
		}
		b.clock.Advance(time.Second)
		if n, err := b.store.EventPurge(b.ctx, params); err != nil || n != 1 {
			t.Fatalf("purge = %d, %v; want 1", n, err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("purged event: err = %v", err)
		}
		if got, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id}); err != nil || len(got) != 0 {
			t.Errorf("purged event's conflicts = %+v, %v; want none", got, err)
		}
		wantState(t, b, pending, ferry.StatePending)
	})

	t.Run("RequeueWakesAndWakesCoalesce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		wake, err := b.store.ReceiptSubscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Nobody reads while these commit: a receipt must not wait for a
		// subscriber, and the wake-ups coalesce.
		var ids []int64
		for i := range 3 {
			ids = append(ids, receive(t, b, "stripe", fmt.Sprint("evt_", i)))
		}
		waitWake(t, wake)
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: claimOne(t, b, "w1").Event.Lease(), Dead: true}); err != nil {
			t.Fatal(err)
		}
		select { // a late wake-up from the receipts, if any, is not the requeue's
		case <-wake:
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: ids[:1]}); err != nil {
			t.Fatal(err)
		}
		waitWake(t, wake)
	})
}

func waitWake(t *testing.T, wake <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-wake:
		if !ok {
			t.Fatal("wake-up channel closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up within 10 s")
	}
}
