package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clock is a fake database clock tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type testBundle struct {
	store *postgres.Store
	clock *clock
}

// setup returns a migrated store in a fresh schema, on a fake clock.
func setup(t testing.TB) *testBundle {
	t.Helper()
	pool, _ := pgtest.Schema(t)
	c := &clock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	store := postgres.New(pool, &postgres.Config{Now: c.Now})
	t.Cleanup(store.Close)
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &testBundle{store: store, clock: c}
}

func receive(t testing.TB, s *postgres.Store, source, eventID string, payload string) *ferry.EventReceiveResult {
	t.Helper()
	res, err := s.EventReceive(context.Background(), &ferry.EventReceiveParams{
		Source: source, EventID: eventID, Type: "test.event", Payload: []byte(payload),
		Headers: http.Header{"Content-Type": {"application/json"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func claim(t testing.TB, s *postgres.Store, owner string, limit int, ttl time.Duration) []*ferry.Claim {
	t.Helper()
	claims, err := s.EventClaimMany(context.Background(), &ferry.EventClaimManyParams{Owner: owner, Limit: limit, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

func get(t testing.TB, s *postgres.Store, id int64) *ferry.Event {
	t.Helper()
	e, err := s.EventGet(context.Background(), &ferry.EventGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func attempts(t testing.TB, s *postgres.Store, id int64) []*ferry.Attempt {
	t.Helper()
	a, err := s.AttemptList(context.Background(), &ferry.AttemptListParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ConcurrentAndRepeated", func(t *testing.T) {
		t.Parallel()
		pool, _ := pgtest.Schema(t)
		store := postgres.New(pool, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() { errs <- store.Migrate(ctx) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		var versions int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM ferry_migration").Scan(&versions); err != nil {
			t.Fatal(err)
		}
		if versions != 1 {
			t.Fatalf("ferry_migration has %d rows, want 1", versions)
		}
	})
}

func TestEventReceive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NewDuplicateConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		first := receive(t, b.store, "stripe", "evt_1", `{"a":1}`)
		if first.Outcome != ferry.ReceiveNew || first.ID == 0 {
			t.Fatalf("first receive = %+v, want new with an id", first)
		}
		b.clock.Advance(time.Minute)
		dup := receive(t, b.store, "stripe", "evt_1", `{"a":1}`)
		if dup.Outcome != ferry.ReceiveDuplicate || dup.ID != first.ID {
			t.Fatalf("duplicate receive = %+v, want duplicate of %d", dup, first.ID)
		}
		conflict := receive(t, b.store, "stripe", "evt_1", `{"a":2}`)
		if conflict.Outcome != ferry.ReceiveConflict || conflict.ID != first.ID {
			t.Fatalf("conflicting receive = %+v, want conflict of %d", conflict, first.ID)
		}
		other := receive(t, b.store, "github", "evt_1", `{"a":1}`)
		if other.Outcome != ferry.ReceiveNew || other.ID == first.ID {
			t.Fatalf("same event id in another source = %+v, want new", other)
		}

		e := get(t, b.store, first.ID)
		start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		switch {
		case e.State != ferry.StatePending, e.Deliveries != 3, e.Conflicts != 1,
			string(e.Payload) != `{"a":1}`, e.Type != "test.event",
			e.Headers.Get("Content-Type") != "application/json",
			!e.FirstDeliveredAt.Equal(start), !e.NextAttemptAt.Equal(start),
			!e.LastDeliveredAt.Equal(start.Add(time.Minute)), e.LastDeliveredAt.Location() != time.UTC:
			t.Fatalf("event after receipts = %+v", e)
		}
		conflicts, err := b.store.ConflictList(ctx, &ferry.ConflictListParams{ID: first.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(conflicts) != 1 || string(conflicts[0].Payload) != `{"a":2}` || len(conflicts[0].PayloadSHA256) != 32 ||
			conflicts[0].Headers.Get("Content-Type") != "application/json" {
			t.Fatalf("conflicts = %+v", conflicts)
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []*ferry.EventReceiveParams{{Source: "s"}, {EventID: "e"}} {
			if _, err := b.store.EventReceive(ctx, p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Fatalf("receive %+v: err = %v, want ErrInvalidParams", p, err)
			}
		}
	})

	t.Run("ConcurrentSameKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 16
		results := make(chan ferry.ReceiveOutcome, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				res, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "same", Payload: []byte("x")})
				if err != nil {
					t.Error(err)
					return
				}
				results <- res.Outcome
			})
		}
		wg.Wait()
		close(results)
		count := map[ferry.ReceiveOutcome]int{}
		for o := range results {
			count[o]++
		}
		if count[ferry.ReceiveNew] != 1 || count[ferry.ReceiveDuplicate] != n-1 {
			t.Fatalf("outcomes = %v, want 1 new and %d duplicate", count, n-1)
		}
		e, err := b.store.EventGet(ctx, &ferry.EventGetParams{Source: "s", EventID: "same"})
		if err != nil {
			t.Fatal(err)
		}
		if e.Deliveries != n {
			t.Fatalf("deliveries = %d, want %d", e.Deliveries, n)
		}
	})
}

func TestEventClaimMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("LeaseAndLedger", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "s", "e1", "p").ID
		receive(t, b.store, "other", "e2", "p")

		claims, err := b.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w1", Limit: 10, TTL: time.Minute, Sources: []string{"s"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) != 1 {
			t.Fatalf("claimed %d events, want 1 (source filter)", len(claims))
		}
		e := claims[0].Event
		now := b.clock.Now()
		if e.ID != id || e.State != ferry.StateInProgress || e.Attempt != 1 || e.LeaseOwner != "w1" ||
			!e.LeaseExpiresAt.Equal(now.Add(time.Minute)) || !e.ClaimedAt.Equal(now) ||
			string(e.Payload) != "p" || claims[0].PreviousUnfinished {
			t.Fatalf("claim = %+v %+v", claims[0], e)
		}
		if again := claim(t, b.store, "w2", 10, time.Minute); len(again) != 1 || again[0].Event.Source != "other" {
			t.Fatalf("second claim = %v, want only the other source's event", again)
		}
		a := attempts(t, b.store, id)
		if len(a) != 1 || a[0].Attempt != 1 || a[0].Worker != "w1" || a[0].Outcome != ferry.OutcomeRunning || !a[0].FinishedAt.IsZero() {
			t.Fatalf("ledger = %+v", a)
		}
	})

	t.Run("NotDueUntilNextAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "s", "e1", "p").ID
		c := claim(t, b.store, "w1", 1, time.Minute)[0]
		state, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Error: "boom", RetryDelay: 10 * time.Second})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("fail = %v, %v; want pending", state, err)
		}
		if got := claim(t, b.store, "w1", 1, time.Minute); len(got) != 0 {
			t.Fatalf("claimed %d events before their retry delay", len(got))
		}
		b.clock.Advance(10 * time.Second)
		got := claim(t, b.store, "w1", 1, time.Minute)
		if len(got) != 1 || got[0].Event.ID != id || got[0].Event.Attempt != 2 || got[0].PreviousUnfinished {
			t.Fatalf("claim after retry delay = %+v", got)
		}
	})

	t.Run("ExpiredLeaseIsTakenBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "s", "e1", "p").ID
		first := claim(t, b.store, "w1", 1, time.Minute)[0]

		b.clock.Advance(59 * time.Second)
		if got := claim(t, b.store, "w2", 1, time.Minute); len(got) != 0 {
			t.Fatal("a living lease was taken")
		}
		b.clock.Advance(time.Second) // the lease expires at exactly now
		second := claim(t, b.store, "w2", 1, time.Minute)
		if len(second) != 1 || second[0].Event.Attempt != 2 || second[0].Event.LeaseOwner != "w2" || !second[0].PreviousUnfinished {
			t.Fatalf("claim of an expired lease = %+v", second)
		}

		// The robbed worker is fenced out of every write.
		lease := first.Event.Lease()
		if _, err := b.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: time.Minute}); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("heartbeat of a lost lease: err = %v", err)
		}
		if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("complete of a lost lease: err = %v", err)
		}
		if _, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: lease, Dead: true}); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("fail of a lost lease: err = %v", err)
		}
		if err := b.store.EventRelease(ctx, &ferry.EventReleaseParams{Lease: lease}); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("release of a lost lease: err = %v", err)
		}
		e := get(t, b.store, id)
		if e.State != ferry.StateInProgress || e.Attempt != 2 || e.LeaseOwner != "w2" {
			t.Fatalf("event after fenced-out writes = %+v", e)
		}
		a := attempts(t, b.store, id)
		if len(a) != 2 || a[0].Outcome != ferry.OutcomeLeaseExpired || !a[0].FinishedAt.Equal(b.clock.Now()) ||
			a[1].Outcome != ferry.OutcomeRunning || a[1].Worker != "w2" {
			t.Fatalf("ledger = %+v %+v", a[0], a[1])
		}
	})

	t.Run("HoldSourceGoesUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "charges", "e1", "p").ID
		claim(t, b.store, "w1", 1, time.Minute)
		b.clock.Advance(time.Minute)
		got, err := b.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w2", Limit: 1, TTL: time.Minute, HoldSources: []string{"charges"}})
		if err != nil || len(got) != 0 {
			t.Fatalf("claim = %v, %v; want nothing", got, err)
		}
		e := get(t, b.store, id)
		if e.State != ferry.StateUnknown || e.LeaseOwner != "" || !e.LeaseExpiresAt.IsZero() {
			t.Fatalf("held event = %+v", e)
		}
		if a := attempts(t, b.store, id); len(a) != 1 || a[0].Outcome != ferry.OutcomeLeaseExpired {
			t.Fatalf("ledger = %+v", a[0])
		}
	})

	t.Run("OldestDueFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ids []int64
		for i := range 3 {
			ids = append(ids, receive(t, b.store, "s", fmt.Sprint(i), "p").ID)
			b.clock.Advance(time.Second)
		}
		got := claim(t, b.store, "w", 2, time.Minute)
		if len(got) != 2 || got[0].Event.ID != ids[0] || got[1].Event.ID != ids[1] {
			t.Fatalf("claimed %v, want the two oldest", got)
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, p := range []*ferry.EventClaimManyParams{
			{Limit: 1, TTL: time.Second},
			{Owner: "w", TTL: time.Second},
			{Owner: "w", Limit: 1},
		} {
			if _, err := b.store.EventClaimMany(ctx, p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Fatalf("claim %+v: err = %v, want ErrInvalidParams", p, err)
			}
		}
	})
}

func TestFencedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("HeartbeatKeepsTheLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := claim(t, b.store, "w1", 1, time.Minute)
		if len(c) != 0 {
			t.Fatal("claimed from an empty inbox")
		}
		receive(t, b.store, "s", "e", "p")
		lease := claim(t, b.store, "w1", 1, time.Minute)[0].Event.Lease()
		b.clock.Advance(50 * time.Second)
		expires, err := b.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: time.Minute})
		if err != nil || !expires.Equal(b.clock.Now().Add(time.Minute)) {
			t.Fatalf("heartbeat = %v, %v", expires, err)
		}
		b.clock.Advance(50 * time.Second)
		if got := claim(t, b.store, "w2", 1, time.Minute); len(got) != 0 {
			t.Fatal("a heartbeated lease was taken")
		}
		if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ExpiredLeaseCannotWriteEvenUnclaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "s", "e", "p").ID
		lease := claim(t, b.store, "w1", 1, time.Minute)[0].Event.Lease()
		b.clock.Advance(time.Minute)
		if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("complete after expiry: err = %v", err)
		}
		if a := attempts(t, b.store, id); a[0].Outcome != ferry.OutcomeRunning {
			t.Fatalf("a refused write changed the ledger: %+v", a[0])
		}
	})

	t.Run("Complete", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "s", "e", "p").ID
		lease := claim(t, b.store, "w1", 1, time.Minute)[0].Event.Lease()
		b.clock.Advance(time.Second)
		if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		e := get(t, b.store, id)
		if e.State != ferry.StateDone || !e.CompletedAt.Equal(b.clock.Now()) || e.LeaseOwner != "" || !e.LeaseExpiresAt.IsZero() {
			t.Fatalf("completed event = %+v", e)
		}
		if a := attempts(t, b.store, id); a[0].Outcome != ferry.OutcomeDone || !a[0].FinishedAt.Equal(b.clock.Now()) {
			t.Fatalf("ledger = %+v", a[0])
		}
		if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("second complete: err = %v", err)
		}
	})

	t.Run("Release", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "s", "e", "p").ID
		lease := claim(t, b.store, "w1", 1, time.Minute)[0].Event.Lease()
		b.clock.Advance(time.Second)
		if err := b.store.EventRelease(ctx, &ferry.EventReleaseParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		e := get(t, b.store, id)
		if e.State != ferry.StatePending || !e.NextAttemptAt.Equal(b.clock.Now()) || e.LeaseOwner != "" {
			t.Fatalf("released event = %+v", e)
		}
		got := claim(t, b.store, "w2", 1, time.Minute)
		if len(got) != 1 || got[0].Event.Attempt != 2 || got[0].PreviousUnfinished {
			t.Fatalf("claim after release = %+v", got)
		}
		if a := attempts(t, b.store, id); a[0].Outcome != ferry.OutcomeReleased {
			t.Fatalf("ledger = %+v", a[0])
		}
	})

	t.Run("FailRules", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name   string
			params ferry.EventFailParams
			age    time.Duration // how long after its receipt the event fails
			want   ferry.State
		}{
			{"Retry", ferry.EventFailParams{RetryDelay: time.Second}, 0, ferry.StatePending},
			{"Permanent", ferry.EventFailParams{Dead: true}, 0, ferry.StateDead},
			{"BudgetSpent", ferry.EventFailParams{MaxAttempts: 1}, 0, ferry.StateDead},
			{"BudgetLeft", ferry.EventFailParams{MaxAttempts: 2}, 0, ferry.StatePending},
			{"TooOld", ferry.EventFailParams{MaxAge: time.Hour}, time.Hour, ferry.StateDead},
			{"YoungEnough", ferry.EventFailParams{MaxAge: time.Hour}, 59 * time.Minute, ferry.StatePending},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				id := receive(t, b.store, "s", "e", "p").ID
				b.clock.Advance(tc.age)
				params := tc.params
				params.Lease = claim(t, b.store, "w", 1, 2*time.Hour)[0].Event.Lease()
				params.Error = "boom"
				state, err := b.store.EventFail(ctx, &params)
				if err != nil || state != tc.want {
					t.Fatalf("fail = %v, %v; want %v", state, err, tc.want)
				}
				e := get(t, b.store, id)
				if e.State != tc.want || e.LastError != "boom" || e.LeaseOwner != "" {
					t.Fatalf("failed event = %+v", e)
				}
				wantOutcome := ferry.OutcomeFailed
				if tc.want == ferry.StateDead {
					wantOutcome = ferry.OutcomeDead
				}
				if a := attempts(t, b.store, id); a[0].Outcome != wantOutcome || a[0].Error != "boom" {
					t.Fatalf("ledger = %+v", a[0])
				}
			})
		}
	})

	t.Run("CompleteTx", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if _, err := b.store.Pool().Exec(ctx, "CREATE TABLE effect (event_id bigint)"); err != nil {
			t.Fatal(err)
		}
		id := receive(t, b.store, "s", "e", "p").ID
		lease := claim(t, b.store, "w1", 1, time.Minute)[0].Event.Lease()

		// A stale lease rolls the handler's write back with it.
		stale := ferry.Lease{ID: lease.ID, Attempt: lease.Attempt + 1}
		err := b.store.InTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO effect VALUES ($1)", id); err != nil {
				return err
			}
			return b.store.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: stale})
		})
		if !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("InTx with a stale lease: err = %v", err)
		}
		err = b.store.InTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO effect VALUES ($1)", id); err != nil {
				return err
			}
			return b.store.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: lease})
		})
		if err != nil {
			t.Fatal(err)
		}
		var effects int
		if err := b.store.Pool().QueryRow(ctx, "SELECT count(*) FROM effect").Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if effects != 1 || get(t, b.store, id).State != ferry.StateDone {
			t.Fatalf("effects = %d, state = %s; want 1 and done", effects, get(t, b.store, id).State)
		}
	})
}

// TestClaimCompleteConcurrently has 8 workers drain 2,000 events on the real
// clock: no event is ever held by two workers at once, and each ends done
// exactly once with a ledger that agrees.
func TestClaimCompleteConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.Schema(t)
	store := postgres.New(pool, nil)
	t.Cleanup(store.Close)
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	const events, workers = 2000, 8
	if _, err := pool.Exec(ctx, `
		INSERT INTO ferry_event (source, event_id, payload, payload_sha256, next_attempt_at, first_delivered_at, last_delivered_at)
		SELECT 's', 'e' || i, '', '', now(), now(), now() FROM generate_series(1, $1) i`, events); err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		holding   = map[int64]string{}
		completed = map[int64]int{}
		wg        sync.WaitGroup
	)
	for w := range workers {
		owner := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for {
				claims, err := store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: owner, Limit: 25, TTL: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(claims) == 0 {
					return
				}
				for _, c := range claims {
					mu.Lock()
					if other, ok := holding[c.Event.ID]; ok {
						t.Errorf("event %d claimed by %s while %s holds it", c.Event.ID, owner, other)
					}
					holding[c.Event.ID] = owner
					mu.Unlock()
				}
				for _, c := range claims {
					if err := store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
						t.Error(err)
					}
					mu.Lock()
					delete(holding, c.Event.ID)
					completed[c.Event.ID]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()

	if len(completed) != events {
		t.Fatalf("completed %d distinct events, want %d", len(completed), events)
	}
	for id, n := range completed {
		if n != 1 {
			t.Fatalf("event %d completed %d times", id, n)
		}
	}
	var done, ledgerDone, ledgerRows int
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM ferry_event WHERE state = 'done' AND attempt = 1),
		       (SELECT count(*) FROM ferry_attempt WHERE outcome = 'done' AND finished_at IS NOT NULL),
		       (SELECT count(*) FROM ferry_attempt)`).Scan(&done, &ledgerDone, &ledgerRows)
	if err != nil {
		t.Fatal(err)
	}
	if done != events || ledgerDone != events || ledgerRows != events {
		t.Fatalf("done = %d, ledger done = %d, ledger rows = %d; want %d each", done, ledgerDone, ledgerRows, events)
	}
}

func TestEventGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	id := receive(t, b.store, "s", "e", "p").ID

	byKey, err := b.store.EventGet(ctx, &ferry.EventGetParams{Source: "s", EventID: "e"})
	if err != nil || byKey.ID != id {
		t.Fatalf("get by key = %+v, %v", byKey, err)
	}
	for _, p := range []*ferry.EventGetParams{{ID: id + 100}, {Source: "s", EventID: "nope"}} {
		if _, err := b.store.EventGet(ctx, p); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("get %+v: err = %v, want ErrNotFound", p, err)
		}
	}
}

func TestEventList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var ids []int64
	for i := range 5 {
		ids = append(ids, receive(t, b.store, "s", fmt.Sprintf("evt_%d", i), "p").ID)
		b.clock.Advance(time.Second)
	}
	receive(t, b.store, "other", "evt%_x", "p")
	claim(t, b.store, "w", 1, time.Minute) // ids[0] goes in_progress

	list := func(p ferry.EventListParams) *ferry.EventListResult {
		t.Helper()
		res, err := b.store.EventList(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	page1 := list(ferry.EventListParams{Source: "s", Limit: 3})
	if len(page1.Events) != 3 || page1.Events[0].ID != ids[4] || page1.NextBefore != ids[2] ||
		page1.Events[0].Payload != nil || page1.Events[0].Headers != nil {
		t.Fatalf("page 1 = %+v", page1)
	}
	page2 := list(ferry.EventListParams{Source: "s", Limit: 3, Before: page1.NextBefore})
	if len(page2.Events) != 2 || page2.Events[1].ID != ids[0] || page2.NextBefore != 0 {
		t.Fatalf("page 2 = %+v", page2)
	}
	if res := list(ferry.EventListParams{States: []ferry.State{ferry.StateInProgress}}); len(res.Events) != 1 || res.Events[0].ID != ids[0] {
		t.Fatalf("in_progress = %+v", res.Events)
	}
	if res := list(ferry.EventListParams{EventIDContains: "%_"}); len(res.Events) != 1 || res.Events[0].Source != "other" {
		t.Fatalf("literal substring = %+v", res.Events)
	}
	if res := list(ferry.EventListParams{Since: time.Date(2025, 1, 2, 3, 4, 8, 0, time.UTC)}); len(res.Events) != 3 {
		t.Fatalf("since = %d events, want 3", len(res.Events))
	}
}

func TestEventRequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	doneID := receive(t, b.store, "s", "done", "p").ID
	deadID := receive(t, b.store, "s", "dead", "p").ID
	pendingID := receive(t, b.store, "s", "pending", "p").ID
	for _, c := range claim(t, b.store, "w", 2, time.Minute) {
		switch c.Event.ID {
		case doneID:
			if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
				t.Fatal(err)
			}
		case deadID:
			if _, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), MaxAttempts: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Bulk defaults to dead and unknown: the done event stays.
	n, err := b.store.EventRequeue(ctx, &ferry.EventRequeueParams{Source: "s"})
	if err != nil || n != 1 {
		t.Fatalf("bulk requeue = %d, %v; want 1", n, err)
	}
	n, err = b.store.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{doneID, pendingID}, States: []ferry.State{ferry.StateDone, ferry.StatePending}})
	if err != nil || n != 1 {
		t.Fatalf("requeue by id = %d, %v; want 1 (pending is never requeued)", n, err)
	}
	for _, id := range []int64{doneID, deadID} {
		e := get(t, b.store, id)
		if e.State != ferry.StatePending || e.Attempt != 1 || !e.RequeuedAt.Equal(b.clock.Now()) || !e.CompletedAt.IsZero() {
			t.Fatalf("requeued event = %+v", e)
		}
	}
	// A fresh budget: MaxAttempts 1 allows one more attempt after the requeue.
	for _, c := range claim(t, b.store, "w", 3, time.Minute) {
		if c.Event.ID != deadID {
			continue
		}
		state, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), MaxAttempts: 2})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("fail after requeue = %v, %v; want pending (budget 2, 1 spent)", state, err)
		}
	}
}

func TestEventPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	id := receive(t, b.store, "s", "e", "p").ID
	receive(t, b.store, "s", "e", "different") // a conflict row to cascade
	receive(t, b.store, "s", "pending", "p")
	lease := claim(t, b.store, "w", 1, time.Minute)[0].Event.Lease()
	if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Fatal(err)
	}

	if _, err := b.store.EventPurge(ctx, &ferry.EventPurgeParams{Source: "s", Retention: time.Hour, ReplayWindow: 2 * time.Hour}); !errors.Is(err, ferry.ErrRetentionTooShort) {
		t.Fatalf("purge under the replay window: err = %v", err)
	}
	params := &ferry.EventPurgeParams{Source: "s", Retention: 24 * time.Hour, ReplayWindow: time.Hour}
	b.clock.Advance(24*time.Hour - time.Second)
	if n, err := b.store.EventPurge(ctx, params); err != nil || n != 0 {
		t.Fatalf("early purge = %d, %v", n, err)
	}
	b.clock.Advance(time.Second)
	if n, err := b.store.EventPurge(ctx, params); err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want 1", n, err)
	}
	if _, err := b.store.EventGet(ctx, &ferry.EventGetParams{ID: id}); !errors.Is(err, ferry.ErrNotFound) {
		t.Fatalf("purged event: err = %v", err)
	}
	if a := attempts(t, b.store, id); len(a) != 0 {
		t.Fatalf("purged event's ledger survived: %+v", a)
	}
}

func TestReceiptSubscribe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WakesOnNewEventsOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		subCtx, cancel := context.WithCancel(ctx)
		signals, err := b.store.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		receive(t, b.store, "s", "e", "p")
		waitSignal(t, signals)
		receive(t, b.store, "s", "e", "p") // a duplicate wakes nobody
		select {
		case <-signals:
			t.Fatal("signal for a duplicate")
		case <-time.After(200 * time.Millisecond):
		}
		cancel()
		for range signals { // closes once ctx is done
		}
	})

	t.Run("SchemasDoNotWakeEachOther", func(t *testing.T) {
		t.Parallel()
		a, other := setup(t), setup(t)
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		signals, err := a.store.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		receive(t, other.store, "s", "e", "p")
		select {
		case <-signals:
			t.Fatal("signal from another schema")
		case <-time.After(200 * time.Millisecond):
		}
	})

	t.Run("ReconnectsAfterTheConnectionDies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		signals, err := b.store.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		var channel string
		if err := b.store.Pool().QueryRow(ctx, "SELECT ferry_receipt_channel()").Scan(&channel); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Pool().Exec(ctx,
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'", channel); err != nil {
			t.Fatal(err)
		}
		waitSignal(t, signals) // the reconnect signals once
		receive(t, b.store, "s", "e", "p")
		waitSignal(t, signals)
	})

	t.Run("RequeueWakes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b.store, "s", "e", "p").ID
		c := claim(t, b.store, "w", 1, time.Minute)[0]
		if _, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Dead: true}); err != nil {
			t.Fatal(err)
		}
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		signals, err := b.store.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{id}}); err != nil {
			t.Fatal(err)
		}
		waitSignal(t, signals)
	})
}

func waitSignal(t *testing.T, signals <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-signals:
		if !ok {
			t.Fatal("signal channel closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no signal within 10s")
	}
}

func currentSchema(t *testing.T, s *postgres.Store) string {
	t.Helper()
	var schema string
	if err := s.Pool().QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	return schema
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)

	store, err := postgres.Open(ctx, pgtest.ConnString(schema), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := currentSchema(t, store); got != schema {
		t.Fatalf("schema = %q, want %q", got, schema)
	}
	signals, err := store.ReceiptSubscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.Close() // stops the subscription and closes the pool Open made
	for range signals {
	}
	if err := store.Pool().Ping(ctx); err == nil {
		t.Fatal("pool still open after Close")
	}
}
