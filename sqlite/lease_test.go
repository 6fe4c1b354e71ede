package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

const ttl = 30 * time.Second

func TestEventClaimMany(t *testing.T) {
	t.Parallel()

	t.Run("DueOrderLimitLedger", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.receive(t, "s", "1")
		b.clock.Advance(time.Millisecond)
		second := b.receive(t, "s", "2")
		b.receive(t, "s", "3")

		claims := b.claim(t, "w1", 2, ttl)
		if len(claims) != 2 || claims[0].Event.ID != first || claims[1].Event.ID != second {
			t.Fatalf("claimed %v, want events %d and %d in order", claims, first, second)
		}
		e := claims[0].Event
		now := b.clock.Now().Truncate(time.Microsecond)
		if e.State != ferry.StateInProgress || e.Attempt != 1 || e.LeaseOwner != "w1" ||
			!e.LeaseExpiresAt.Equal(now.Add(ttl)) || !e.ClaimedAt.Equal(now) ||
			string(e.Payload) != `{"id":"1"}` || e.Headers.Get("Content-Type") != "application/json" {
			t.Errorf("claimed event = %+v", e)
		}
		if claims[0].PreviousUnfinished {
			t.Error("first attempt reports an unfinished previous one")
		}
		a := b.attempts(t, first)
		if len(a) != 1 || a[0].Attempt != 1 || a[0].Worker != "w1" || a[0].Outcome != ferry.OutcomeRunning ||
			!a[0].StartedAt.Equal(now) || !a[0].FinishedAt.IsZero() {
			t.Errorf("ledger = %+v, want one running row", a)
		}
		if got := b.claim(t, "w2", 10, ttl); len(got) != 1 {
			t.Errorf("second claim took %d events, want the 1 left", len(got))
		}
		if got := b.claim(t, "w2", 10, ttl); len(got) != 0 {
			t.Errorf("third claim took %d events, want none", len(got))
		}
	})

	t.Run("Sources", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.receive(t, "a", "1")
		want := b.receive(t, "b", "1")
		claims, err := b.store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{
			Owner: "w", Limit: 10, TTL: ttl, Sources: []string{"b"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) != 1 || claims[0].Event.ID != want {
			t.Errorf("claims = %v, want only source b", claims)
		}
	})

	t.Run("NotYetDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.receive(t, "s", "1")
		c := b.claim(t, "w", 1, ttl)[0]
		if _, err := b.store.EventFail(t.Context(), &ferry.EventFailParams{Lease: c.Event.Lease(), RetryDelay: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if got := b.claim(t, "w", 1, ttl); len(got) != 0 {
			t.Fatal("claimed an event before its next attempt time")
		}
		b.clock.Advance(time.Minute)
		if got := b.claim(t, "w", 1, ttl); len(got) != 1 || got[0].Event.Attempt != 2 {
			t.Fatalf("claims = %v, want attempt 2 once due", got)
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []*ferry.EventClaimManyParams{
			{Limit: 1, TTL: ttl}, {Owner: "w", TTL: ttl}, {Owner: "w", Limit: 1},
		} {
			if _, err := b.store.EventClaimMany(t.Context(), p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("EventClaimMany(%+v) = %v, want ErrInvalidParams", p, err)
			}
		}
	})

	t.Run("ConcurrentClaimersNeverShare", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const events = 60
		for i := range events {
			b.receive(t, "s", fmt.Sprint(i))
		}
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				for {
					claims, err := b.store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{
						Owner: fmt.Sprint("w", w), Limit: 3, TTL: ttl,
					})
					if err != nil {
						t.Error(err)
						return
					}
					if len(claims) == 0 {
						return
					}
					mu.Lock()
					for _, c := range claims {
						seen[c.Event.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != events {
			t.Errorf("%d events claimed, want %d", len(seen), events)
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("event %d claimed %d times", id, n)
			}
		}
	})
}

// TestLeaseExpiry walks the fencing rules on a fake clock: a lease is held
// until it expires, then a new claim takes the event back and the old holder
// can change nothing.
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	id := b.receive(t, "s", "1")
	old := b.claim(t, "w1", 1, ttl)[0].Event.Lease()

	// Before expiry: nobody else can claim it, and a heartbeat extends it.
	b.clock.Advance(ttl - time.Second)
	if got := b.claim(t, "w2", 1, ttl); len(got) != 0 {
		t.Fatal("claimed a live lease")
	}
	expires, err := b.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: old, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if want := b.clock.Now().Add(ttl).Truncate(time.Microsecond); !expires.Equal(want) || !b.get(t, id).LeaseExpiresAt.Equal(want) {
		t.Errorf("heartbeat expiry = %v, want %v", expires, want)
	}

	// At expiry the lease is gone: a heartbeat is refused and a claim takes it.
	b.clock.Advance(ttl)
	if _, err := b.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: old, TTL: ttl}); !errors.Is(err, ferry.ErrLeaseLost) {
		t.Fatalf("heartbeat on an expired lease = %v, want ErrLeaseLost", err)
	}
	claims := b.claim(t, "w2", 1, ttl)
	if len(claims) != 1 || claims[0].Event.Attempt != 2 || !claims[0].PreviousUnfinished {
		t.Fatalf("reclaim = %+v, want attempt 2 with an unfinished previous", claims)
	}
	current := claims[0].Event.Lease()
	a := b.attempts(t, id)
	if len(a) != 2 || a[0].Outcome != ferry.OutcomeLeaseExpired || !a[0].FinishedAt.Equal(b.clock.Now().Truncate(time.Microsecond)) ||
		a[1].Outcome != ferry.OutcomeRunning || a[1].Worker != "w2" {
		t.Fatalf("ledger = %+v, want lease_expired then running", a)
	}

	// The robbed worker wakes up: every fenced write fails and changes nothing.
	before := b.get(t, id)
	fenced := map[string]error{
		"heartbeat": func() error {
			_, err := b.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: old, TTL: ttl})
			return err
		}(),
		"complete": b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: old}),
		"fail": func() error {
			_, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: old, Error: "x", Dead: true})
			return err
		}(),
		"release": b.store.EventRelease(ctx, &ferry.EventReleaseParams{Lease: old}),
		"completeTx": b.store.InTx(ctx, func(tx *sql.Tx) error {
			return b.store.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: old})
		}),
	}
	for op, err := range fenced {
		if !errors.Is(err, ferry.ErrLeaseLost) {
			t.Errorf("%s with the old lease = %v, want ErrLeaseLost", op, err)
		}
	}
	after := b.get(t, id)
	if after.State != before.State || after.Attempt != before.Attempt || !after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) {
		t.Errorf("event changed by fenced-out writes: %+v -> %+v", before, after)
	}
	if a := b.attempts(t, id); a[0].Outcome != ferry.OutcomeLeaseExpired || a[1].Outcome != ferry.OutcomeRunning {
		t.Errorf("ledger changed by fenced-out writes: %+v", a)
	}

	// The current holder completes; after that its lease is spent too.
	if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: current}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: current}); !errors.Is(err, ferry.ErrLeaseLost) {
		t.Errorf("second complete = %v, want ErrLeaseLost", err)
	}
}

func TestHoldSources(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := b.receive(t, "hold", "1")
	retried := b.receive(t, "retry", "1")
	b.claim(t, "w1", 2, ttl)
	b.clock.Advance(ttl)

	claims, err := b.store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{
		Owner: "w2", Limit: 10, TTL: ttl, HoldSources: []string{"hold"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].Event.ID != retried || !claims[0].PreviousUnfinished {
		t.Fatalf("claims = %+v, want only the retry source's event", claims)
	}
	e := b.get(t, held)
	if e.State != ferry.StateUnknown || e.LeaseOwner != "" || !e.LeaseExpiresAt.IsZero() {
		t.Errorf("held event = %+v, want unknown without a lease", e)
	}
	if a := b.attempts(t, held); len(a) != 1 || a[0].Outcome != ferry.OutcomeLeaseExpired || a[0].FinishedAt.IsZero() {
		t.Errorf("held ledger = %+v, want one lease_expired row", a)
	}
}

func TestEventComplete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.receive(t, "s", "1")
	lease := b.claim(t, "w", 1, ttl)[0].Event.Lease()
	b.clock.Advance(time.Second)
	if err := b.store.EventComplete(t.Context(), &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	now := b.clock.Now().Truncate(time.Microsecond)
	e := b.get(t, id)
	if e.State != ferry.StateDone || !e.CompletedAt.Equal(now) || e.LeaseOwner != "" || !e.LeaseExpiresAt.IsZero() {
		t.Errorf("event = %+v, want done now without a lease", e)
	}
	if a := b.attempts(t, id); a[0].Outcome != ferry.OutcomeDone || !a[0].FinishedAt.Equal(now) || a[0].Error != "" {
		t.Errorf("ledger = %+v, want done", a)
	}
}

func TestEventCompleteTx(t *testing.T) {
	t.Parallel()

	t.Run("CommitsWithHandlerWrites", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sqlExec(t, b.store.DB(), "CREATE TABLE effect (event_id INTEGER)")
		id := b.receive(t, "s", "1")
		lease := b.claim(t, "w", 1, ttl)[0].Event.Lease()
		err := b.store.InTx(t.Context(), func(tx *sql.Tx) error {
			if _, err := tx.Exec("INSERT INTO effect VALUES (?)", id); err != nil {
				return err
			}
			return b.store.EventCompleteTx(t.Context(), tx, &ferry.EventCompleteParams{Lease: lease})
		})
		if err != nil {
			t.Fatal(err)
		}
		if e := b.get(t, id); e.State != ferry.StateDone {
			t.Errorf("state = %s, want done", e.State)
		}
		if n := countRows(t, b, "effect"); n != 1 {
			t.Errorf("effect rows = %d, want 1", n)
		}
	})

	t.Run("LeaseLostRollsBackHandlerWrites", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sqlExec(t, b.store.DB(), "CREATE TABLE effect (event_id INTEGER)")
		id := b.receive(t, "s", "1")
		lease := b.claim(t, "w", 1, ttl)[0].Event.Lease()
		b.clock.Advance(ttl)
		err := b.store.InTx(t.Context(), func(tx *sql.Tx) error {
			if _, err := tx.Exec("INSERT INTO effect VALUES (?)", id); err != nil {
				return err
			}
			return b.store.EventCompleteTx(t.Context(), tx, &ferry.EventCompleteParams{Lease: lease})
		})
		if !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("InTx = %v, want ErrLeaseLost", err)
		}
		if n := countRows(t, b, "effect"); n != 0 {
			t.Errorf("effect rows = %d, want 0 after rollback", n)
		}
	})
}

func countRows(t *testing.T, b *testBundle, table string) int {
	t.Helper()
	var n int
	if err := b.store.DB().QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestEventFail(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		params ferry.EventFailParams
		// age is how long after its first delivery the event is claimed.
		age        time.Duration
		wantState  ferry.State
		wantOutcom ferry.Outcome
	}{
		{name: "Retry", params: ferry.EventFailParams{RetryDelay: time.Minute, MaxAttempts: 5}, wantState: ferry.StatePending, wantOutcom: ferry.OutcomeFailed},
		{name: "Dead", params: ferry.EventFailParams{Dead: true}, wantState: ferry.StateDead, wantOutcom: ferry.OutcomeDead},
		{name: "BudgetSpent", params: ferry.EventFailParams{MaxAttempts: 1}, wantState: ferry.StateDead, wantOutcom: ferry.OutcomeDead},
		{name: "TooOld", params: ferry.EventFailParams{MaxAge: time.Hour}, age: time.Hour, wantState: ferry.StateDead, wantOutcom: ferry.OutcomeDead},
		{name: "YoungEnough", params: ferry.EventFailParams{MaxAge: time.Hour}, age: time.Hour - time.Second, wantState: ferry.StatePending, wantOutcom: ferry.OutcomeFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := b.receive(t, "s", "1")
			b.clock.Advance(tt.age)
			lease := b.claim(t, "w", 1, ttl)[0].Event.Lease()
			tt.params.Lease, tt.params.Error = lease, "boom"
			state, err := b.store.EventFail(t.Context(), &tt.params)
			if err != nil {
				t.Fatal(err)
			}
			e := b.get(t, id)
			if state != tt.wantState || e.State != tt.wantState || e.LastError != "boom" || e.LeaseOwner != "" || !e.LeaseExpiresAt.IsZero() {
				t.Errorf("state %s, event %+v; want %s with last error", state, e, tt.wantState)
			}
			if want := b.clock.Now().Add(tt.params.RetryDelay).Truncate(time.Microsecond); state == ferry.StatePending && !e.NextAttemptAt.Equal(want) {
				t.Errorf("next attempt at %v, want %v", e.NextAttemptAt, want)
			}
			if a := b.attempts(t, id); a[0].Outcome != tt.wantOutcom || a[0].Error != "boom" || a[0].FinishedAt.IsZero() {
				t.Errorf("ledger = %+v, want %s", a, tt.wantOutcom)
			}
		})
	}

	t.Run("BudgetRestartsOnRequeue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.receive(t, "s", "1")
		fail := func() ferry.State {
			lease := b.claim(t, "w", 1, ttl)[0].Event.Lease()
			state, err := b.store.EventFail(t.Context(), &ferry.EventFailParams{Lease: lease, MaxAttempts: 2, MaxAge: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return state
		}
		if s1, s2 := fail(), fail(); s1 != ferry.StatePending || s2 != ferry.StateDead {
			t.Fatalf("states = %s, %s; want pending then dead", s1, s2)
		}
		b.clock.Advance(2 * time.Hour) // older than MaxAge since first delivery
		if n, err := b.store.EventRequeue(t.Context(), &ferry.EventRequeueParams{IDs: []int64{id}}); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		if s := fail(); s != ferry.StatePending {
			t.Errorf("first attempt after requeue went %s, want pending: budget and age restart", s)
		}
		if e := b.get(t, id); e.Attempt != 3 {
			t.Errorf("attempt = %d, want 3: the counter never goes down", e.Attempt)
		}
	})
}

func TestEventRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.receive(t, "s", "1")
	lease := b.claim(t, "w", 1, ttl)[0].Event.Lease()
	b.clock.Advance(time.Second)
	ch, err := b.store.ReceiptSubscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.EventRelease(t.Context(), &ferry.EventReleaseParams{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Error("no signal after a release")
	}
	e := b.get(t, id)
	if e.State != ferry.StatePending || !e.NextAttemptAt.Equal(b.clock.Now().Truncate(time.Microsecond)) || e.LeaseOwner != "" {
		t.Errorf("event = %+v, want pending and due now", e)
	}
	if a := b.attempts(t, id); a[0].Outcome != ferry.OutcomeReleased {
		t.Errorf("ledger = %+v, want released", a)
	}
	claims := b.claim(t, "w2", 1, ttl)
	if len(claims) != 1 || claims[0].Event.Attempt != 2 || claims[0].PreviousUnfinished {
		t.Errorf("claims after release = %+v, want attempt 2, previous finished", claims)
	}
}

func TestInTxPanicReleasesWriter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	func() {
		defer func() { _ = recover() }()
		_ = b.store.InTx(t.Context(), func(*sql.Tx) error { panic("handler bug") })
	}()
	b.receive(t, "s", "after-panic") // would wait forever on a leaked write connection
}
