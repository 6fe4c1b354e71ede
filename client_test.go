package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/testlog"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/sqlite"
	"github.com/ferry-inbox/ferry/storetest"
)

type clientBundle struct {
	store *sqlite.Store
	clock *storetest.Clock // nil: the real clock
	ctx   context.Context
}

func setupClient(t *testing.T, fakeClock bool) *clientBundle {
	t.Helper()
	b := &clientBundle{ctx: context.Background()}
	cfg := &sqlite.Config{}
	if fakeClock {
		b.clock = storetest.NewClock()
		cfg.Now = b.clock.Now
	}
	b.store = teststore.SQLite(t, cfg)
	return b
}

// withClient runs test as a parallel subtest with a fresh store; fakeClock
// puts the store on a storetest.Clock.
func withClient(t *testing.T, name string, fakeClock bool, test func(*testing.T, *clientBundle)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		test(t, setupClient(t, fakeClock))
	})
}

func (b *clientBundle) receive(t *testing.T, source, eventID string) int64 {
	t.Helper()
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: source, EventID: eventID, Type: "test", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// newClient makes a client with fast test settings; edit tweaks them. The
// lease is long on the wall clock (a loaded machine can stall heartbeats for
// seconds); tests that need a lease to end drive the store's clock instead.
func (b *clientBundle) newClient(t *testing.T, edit func(*ferry.Config)) *ferry.Client {
	t.Helper()
	cfg := &ferry.Config{
		Store: b.store, LeaseTTL: 30 * time.Second, PollInterval: 20 * time.Millisecond,
		RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond, ShutdownGrace: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if edit != nil {
		edit(cfg)
	}
	c, err := ferry.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func start(t *testing.T, c *ferry.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
}

// doneOn is a handler that returns once release is closed, or with its
// context's error when it is cancelled first (Stop, a lost lease).
func doneOn(release <-chan struct{}) ferry.HandlerFunc {
	return func(ctx context.Context, _ *ferry.Delivery) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stopWhileRunning starts a client with a short grace whose handler for
// source runs until Stop cancels it, then returns verdict(ctx); it returns
// once Stop has.
func (b *clientBundle) stopWhileRunning(t *testing.T, source string, policies []ferry.SourcePolicy, verdict func(context.Context) error) {
	t.Helper()
	running := make(chan struct{})
	c := b.newClient(t, func(c *ferry.Config) { c.ShutdownGrace, c.Sources = 50*time.Millisecond, policies })
	c.Handle(source, func(ctx context.Context, _ *ferry.Delivery) error {
		close(running)
		<-ctx.Done()
		return verdict(ctx)
	})
	if err := c.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	<-running
	if err := c.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// event reads the event as the store holds it now.
func (b *clientBundle) event(t *testing.T, id int64) *ferry.Event {
	t.Helper()
	ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// waitState polls the store (not the wall clock of the code under test) until
// the event reaches want, failing after 20 s.
func (b *clientBundle) waitState(t *testing.T, id int64, want ferry.State) *ferry.Event {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ev := b.event(t, id)
		if ev.State == want {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %d is %s (attempt %d, error %q), want %s", id, ev.State, ev.Attempt, ev.LastError, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *clientBundle) outcomes(t *testing.T, id int64) []ferry.Outcome {
	t.Helper()
	list, err := b.store.AttemptList(b.ctx, &ferry.AttemptListParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	var out []ferry.Outcome
	for _, a := range list {
		out = append(out, a.Outcome)
	}
	return out
}

// wantLedger checks the outcomes of the event's attempts, oldest first,
// written as fmt prints them ("[failed done]").
func (b *clientBundle) wantLedger(t *testing.T, id int64, want string) {
	t.Helper()
	if out := b.outcomes(t, id); fmt.Sprint(out) != want {
		t.Errorf("event %d ledger = %v, want %s", id, out, want)
	}
}

// wantCancelledByLostLease waits, 30 s at the most, for the cause a
// handler's context was cancelled with, and checks it is ErrLeaseLost.
func wantCancelledByLostLease(t *testing.T, cause <-chan error) {
	t.Helper()
	select {
	case err := <-cause:
		if !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("handler cancelled with %v, want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("handler not cancelled long after its lease was lost")
	}
}

func TestClient(t *testing.T) {
	t.Parallel()

	withClient(t, "CompletesWithAStableIdempotencyKey", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		var got []*ferry.Delivery
		var mu sync.Mutex
		c := b.newClient(t, nil)
		c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, d)
			if len(got) < 3 {
				return errors.New("downstream 500")
			}
			return nil
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 3 {
			t.Fatalf("handler ran %d times, want 3", len(got))
		}
		for i, d := range got {
			if d.Attempt != i+1 || d.IdempotencyKey != ferry.IdempotencyKey("stripe", "evt_1") || d.Event.EventID != "evt_1" || d.PreviousUnfinished {
				t.Errorf("delivery %d = attempt %d key %s unfinished %v", i, d.Attempt, d.IdempotencyKey, d.PreviousUnfinished)
			}
		}
		b.wantLedger(t, id, "[failed failed done]")
	})

	withClient(t, "AnyErrorTextIsRecorded", false, func(t *testing.T, b *clientBundle) {
		// A handler's error may quote bytes no store keeps as text (a NUL,
		// a binary body): the failure is recorded with them replaced.
		id := b.receive(t, "stripe", "evt_1")
		var calls atomic.Int32
		c := b.newClient(t, nil)
		c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
			if calls.Add(1) == 1 {
				return errors.New("downstream said \x00\xff")
			}
			return nil
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		b.wantLedger(t, id, "[failed done]")
		list, err := b.store.AttemptList(b.ctx, &ferry.AttemptListParams{ID: id})
		if err != nil || len(list) != 2 || list[0].Error != "downstream said \uFFFD\uFFFD" {
			t.Errorf("attempts = %+v, %v; want the first failed with its error text made storable", list, err)
		}
	})

	withClient(t, "PermanentErrorIsDeadAtOnce", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		c := b.newClient(t, nil)
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error {
			return ferry.Permanent(errors.New("app answered 404"))
		})
		start(t, c)
		ev := b.waitState(t, id, ferry.StateDead)
		if ev.Attempt != 1 || ev.LastError != "app answered 404" {
			t.Errorf("dead after %d attempts with %q", ev.Attempt, ev.LastError)
		}
	})

	// A downstream's Retry-After added to a Permanent error leaves it
	// permanent, and a Retry-After of a year waits MaxRetryAfter.
	withClient(t, "RetryAfterKeepsPermanentAndIsBounded", true, func(t *testing.T, b *clientBundle) {
		dead := b.receive(t, "stripe", "evt_dead")
		later := b.receive(t, "stripe", "evt_later")
		c := b.newClient(t, nil)
		c.Handle("stripe", func(_ context.Context, d *ferry.Delivery) error {
			if d.Event.ID == dead {
				return ferry.RetryAfter(ferry.Permanent(errors.New("app answered 404")), time.Minute)
			}
			return ferry.RetryAfter(errors.New("app answered 503"), 365*24*time.Hour)
		})
		start(t, c)
		if ev := b.waitState(t, dead, ferry.StateDead); ev.Attempt != 1 {
			t.Errorf("permanent error under RetryAfter: dead after %d attempts, want 1", ev.Attempt)
		}
		waitFor(t, "the first attempt's failure", func() bool {
			ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: later})
			return err == nil && ev.State == ferry.StatePending && ev.Attempt == 1
		})
		ev := b.event(t, later)
		if wait := ev.NextAttemptAt.Sub(b.clock.Now()); wait > ferry.MaxRetryAfter || wait < ferry.MaxRetryAfter-time.Minute {
			t.Errorf("RetryAfter of a year: next attempt in %v, want %v", wait, ferry.MaxRetryAfter)
		}
	})

	withClient(t, "WhatNoStoreKeepsIsRefused", false, func(t *testing.T, b *clientBundle) {
		// A store could not record a failure under such a budget, nor a
		// claim under such an ID, and a negative replay window would send
		// every failing event dead: refused at once, not at the first claim.
		past := ferry.MaxCount
		past++
		for name, cfg := range map[string]*ferry.Config{
			"MaxAttempts past MaxCount": {Store: b.store, Sources: []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: past}}},
			"ID not UTF-8":              {Store: b.store, ID: "w\xff"},
			"negative ReplayWindow":     {Store: b.store, Sources: []ferry.SourcePolicy{{Name: "stripe", ReplayWindow: -time.Hour}}},
			"no Config":                 nil,
		} {
			if _, err := ferry.NewClient(cfg); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("NewClient with %s = %v, want ErrInvalidParams", name, err)
			}
		}
	})

	withClient(t, "DeadAfterMaxAttempts", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		c := b.newClient(t, func(c *ferry.Config) { c.Sources = []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: 4}} })
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return errors.New("always") })
		start(t, c)
		if ev := b.waitState(t, id, ferry.StateDead); ev.Attempt != 4 {
			t.Errorf("dead after %d attempts, want 4", ev.Attempt)
		}
	})

	// A source whose policy leaves ReplayWindow zero, or has no policy, gets
	// DefaultReplayWindow as its age limit: a failure past it sends the
	// event dead however many attempts are left; one short of it retries.
	withClient(t, "DeadPastTheDefaultReplayWindow", true, func(t *testing.T, b *clientBundle) {
		old := map[string]int64{"stripe": b.receive(t, "stripe", "evt_old"), "github": b.receive(t, "github", "evt_old")}
		b.clock.Advance(time.Hour)
		young := map[string]int64{"stripe": b.receive(t, "stripe", "evt_young"), "github": b.receive(t, "github", "evt_young")}
		b.clock.Advance(ferry.DefaultReplayWindow - time.Hour/2) // old past the window, young not
		c := b.newClient(t, func(c *ferry.Config) { c.Sources = []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: 10}} })
		for _, source := range []string{"stripe", "github"} {
			c.Handle(source, func(context.Context, *ferry.Delivery) error { return ferry.RetryAfter(errors.New("down"), time.Hour) })
		}
		start(t, c)
		for source, id := range old {
			if ev := b.waitState(t, id, ferry.StateDead); ev.Attempt != 1 {
				t.Errorf("%s evt_old: dead after %d attempts, want 1: it is older than the default replay window", source, ev.Attempt)
			}
		}
		for source, id := range young {
			var ev *ferry.Event
			waitFor(t, source+" evt_young's first verdict", func() bool {
				ev = b.event(t, id)
				return ev.Attempt == 1 && ev.State != ferry.StateInProgress
			})
			if ev.State != ferry.StatePending {
				t.Errorf("%s evt_young after one failure: %s, want pending (within the window)", source, ev.State)
			}
		}
	})

	// Attempts whose worker died (a handler that crashes its process, here
	// claims left to lapse) spend the budget too: past it the event goes
	// dead without running, rather than being claimed for ever.
	withClient(t, "AttemptsThatNeverFinishSpendTheBudget", true, func(t *testing.T, b *clientBundle) {
		spent, left := b.receive(t, "stripe", "evt_spent"), b.receive(t, "stripe", "evt_left")
		lapse := func(limit int) {
			claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "crashed", Limit: limit, TTL: time.Second, Sources: []string{"stripe"}})
			if err != nil || len(claims) != limit {
				t.Fatalf("claim: %d events, %v; want %d", len(claims), err, limit)
			}
			b.clock.Advance(2 * time.Second)
		}
		lapse(2) // attempt 1 of both
		lapse(2) // attempt 2 of both
		claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "crashed", Limit: 1, TTL: time.Second, Sources: []string{"stripe"}})
		if err != nil || len(claims) != 1 || claims[0].Event.ID != spent {
			t.Fatalf("third claim: %v %v, want evt_spent", claims, err)
		}
		b.clock.Advance(2 * time.Second) // evt_spent: 3 attempts spent; evt_left: 2
		// Released attempts (a graceful stop) count, but a release is no
		// sign of a crashing handler: the event still runs once.
		released := b.receive(t, "github", "evt_released")
		for range 3 {
			claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "stopping", Limit: 1, TTL: time.Minute, Sources: []string{"github"}})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %v %v", claims, err)
			}
			if err := b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: claims[0].Event.Lease()}); err != nil {
				t.Fatal(err)
			}
		}
		// Nor is a release after a lapse: the event runs once more, and its
		// handler hears of the lapse.
		lapsedReleased := b.receive(t, "shopify", "evt_lapsed_released")
		claimShopify := func(owner string, ttl time.Duration) ferry.Lease {
			claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: owner, Limit: 1, TTL: ttl, Sources: []string{"shopify"}})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %v %v", claims, err)
			}
			return claims[0].Event.Lease()
		}
		claimShopify("crashed", time.Second)
		b.clock.Advance(2 * time.Second)
		if err := b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: claimShopify("stopping", time.Minute)}); err != nil {
			t.Fatal(err)
		}
		var ran, unfinished sync.Map
		c := b.newClient(t, func(c *ferry.Config) {
			c.Sources = []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: 3}, {Name: "github", MaxAttempts: 3}, {Name: "shopify", MaxAttempts: 2}}
		})
		handler := func(_ context.Context, d *ferry.Delivery) error {
			ran.Store(d.Event.EventID, d.Attempt)
			unfinished.Store(d.Event.EventID, d.PreviousUnfinished)
			return nil
		}
		c.Handle("stripe", handler)
		c.Handle("github", handler)
		c.Handle("shopify", handler)
		start(t, c)
		b.waitState(t, released, ferry.StateDone)
		b.waitState(t, lapsedReleased, ferry.StateDone)
		b.wantLedger(t, lapsedReleased, "[lease_expired released done]")
		if u, _ := unfinished.Load("evt_lapsed_released"); u != true {
			t.Errorf("the run after a lapse and a release: PreviousUnfinished = %v, want true", u)
		}
		ev := b.waitState(t, spent, ferry.StateDead)
		if !strings.Contains(ev.LastError, "budget of 3 attempts is spent") {
			t.Errorf("last error %q does not say the budget is spent", ev.LastError)
		}
		// Its verdict is dead, but no handler ran: the ledger says released.
		b.wantLedger(t, spent, "[lease_expired lease_expired lease_expired released]")
		if a, ok := ran.Load("evt_spent"); ok {
			t.Errorf("the handler ran attempt %v of an event past its budget", a)
		}
		b.waitState(t, left, ferry.StateDone) // its last attempt of the budget still runs
		b.wantLedger(t, left, "[lease_expired lease_expired done]")
		// Replayed, it runs with a fresh budget, and its handler hears that
		// the last attempt that ran never finished.
		if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{spent}, Actor: "op"}); err != nil {
			t.Fatal(err)
		}
		b.waitState(t, spent, ferry.StateDone)
		if u, _ := unfinished.Load("evt_spent"); u != true {
			t.Errorf("the replay of an event dead by its budget: PreviousUnfinished = %v, want true", u)
		}
	})

	// An event of a type no handler takes goes dead without running, and
	// the ledger says no handler ran.
	withClient(t, "NoHandlerForTheTypeIsDeadNotRun", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1") // of type "test"
		c := b.newClient(t, nil)
		c.HandleType("stripe", "invoice.paid", func(context.Context, *ferry.Delivery) error { return nil })
		start(t, c)
		if ev := b.waitState(t, id, ferry.StateDead); !strings.Contains(ev.LastError, `no handler for source "stripe" type "test"`) {
			t.Errorf("last error %q does not say no handler takes the type", ev.LastError)
		}
		b.wantLedger(t, id, "[released]")
	})

	withClient(t, "PanicIsAFailedAttempt", false, func(t *testing.T, b *clientBundle) {
		first := b.receive(t, "stripe", "boom")
		second := b.receive(t, "stripe", "fine")
		c := b.newClient(t, func(c *ferry.Config) { c.Workers = 1 })
		c.Handle("stripe", func(_ context.Context, d *ferry.Delivery) error {
			if d.Event.EventID == "boom" && d.Attempt == 1 {
				panic("handler bug")
			}
			return nil
		})
		start(t, c)
		b.waitState(t, second, ferry.StateDone)
		b.waitState(t, first, ferry.StateDone)
		b.wantLedger(t, first, "[failed done]")
	})

	// A panic's value is stored whole; the log gets its Redacted and,
	// beside it, the stack it panicked on.
	withClient(t, "APanicKeepsItsRedaction", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		var logs testlog.Buffer
		c := b.newClient(t, func(cfg *ferry.Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		c.Handle("stripe", func(_ context.Context, d *ferry.Delivery) error {
			if d.Attempt == 1 {
				panicInHandler(redactedError{"downstream said: PAYLOADMARK", "downstream said: [redacted]"})
			}
			return nil
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		attempts, err := b.store.AttemptList(t.Context(), &ferry.AttemptListParams{ID: id})
		if err != nil || len(attempts) == 0 || !strings.Contains(attempts[0].Error, "handler panicked: downstream said: PAYLOADMARK") {
			t.Errorf("attempts %+v, %v; want the first's whole panic value", attempts, err)
		}
		// The stack is an attribute of its own: the err the span also
		// gets holds none.
		if out := logs.String(); strings.Contains(out, "PAYLOADMARK") || !strings.Contains(out, `err="ferry: handler panicked: downstream said: [redacted]" `) ||
			!strings.Contains(out, `stack="goroutine `) || !strings.Contains(out, "panicInHandler") {
			t.Errorf("the log line is not the panic's Redacted with its stack beside it:\n%s", out)
		}
	})

	withClient(t, "TypeHandlerBeforeCatchAll", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		var which atomic.Value
		c := b.newClient(t, nil)
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { which.Store("any"); return nil })
		c.HandleType("stripe", "test", func(context.Context, *ferry.Delivery) error { which.Store("typed"); return nil })
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		if which.Load() != "typed" {
			t.Errorf("ran the %v handler", which.Load())
		}
	})

	withClient(t, "LostLeaseCancelsTheHandler", true, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		cause := make(chan error, 1)
		running := make(chan struct{})
		// A TTL of an hour: the worker's own timer (an hour of wall clock)
		// cannot cancel the handler within the test's wait, only a
		// heartbeat that finds the lease gone.
		c := b.newClient(t, func(c *ferry.Config) { c.LeaseTTL, c.HeartbeatInterval = time.Hour, 50*time.Millisecond })
		c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
			if d.Attempt > 1 {
				return nil
			}
			close(running)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
		start(t, c)
		<-running
		b.clock.Advance(2 * time.Hour) // the database says the lease is over
		wantCancelledByLostLease(t, cause)
		// The robbed attempt wrote no verdict; the next claim closed it as
		// lease_expired and did the work.
		b.waitState(t, id, ferry.StateDone)
		b.wantLedger(t, id, "[lease_expired done]")
	})

	// The handler runs for three lease TTLs of database time: the owner's
	// heartbeats keep its lease, and a second client polling all along never
	// takes the event. The test drives the database clock half a TTL at a
	// time and waits for a heartbeat after each step, so a busy machine
	// slows the test but cannot make the lease lapse; the wall-clock TTL is
	// long for the same reason.
	withClient(t, "SlowHandlerOnALivingWorkerIsNeverRobbed", true, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		const ttl = 30 * time.Second
		var runs atomic.Int32
		running, finish := make(chan struct{}), make(chan struct{})
		slow := func(ctx context.Context, d *ferry.Delivery) error {
			if runs.Add(1) == 1 {
				close(running)
			}
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		fast := func(c *ferry.Config) { c.LeaseTTL = ttl; c.HeartbeatInterval = 20 * time.Millisecond }
		owner := b.newClient(t, fast)
		owner.Handle("stripe", slow)
		start(t, owner)
		<-running
		thief := b.newClient(t, fast)
		thief.Handle("stripe", slow)
		start(t, thief)
		for range 6 {
			b.clock.Advance(ttl / 2)
			// Before the step the lease ended at most ttl/2 after the new
			// now; only a heartbeat sent after it moves it further.
			beat := b.clock.Now().Add(ttl / 2)
			deadline := time.Now().Add(20 * time.Second)
			for {
				ev := b.event(t, id)
				if ev.State != ferry.StateInProgress || ev.Attempt != 1 {
					t.Fatalf("event is %s at attempt %d while its first handler runs", ev.State, ev.Attempt)
				}
				if ev.LeaseExpiresAt.After(beat) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no heartbeat extended the lease (ends %v, database now %v)", ev.LeaseExpiresAt, b.clock.Now())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		close(finish)
		b.waitState(t, id, ferry.StateDone)
		if n := runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		b.wantLedger(t, id, "[done]")
	})

	withClient(t, "StopReleasesUnfinishedWork", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		b.stopWhileRunning(t, "stripe", nil, context.Context.Err)
		b.waitState(t, id, ferry.StatePending)
		claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "next", Limit: 1, TTL: time.Minute})
		if err != nil || len(claims) != 1 {
			t.Fatalf("released event not claimable at once: %d, %v", len(claims), err)
		}
		b.wantLedger(t, id, "[released running]")
	})

	// Cancellation comes back in many forms (an RPC status, a wrapped
	// cause): any failure after the grace is cut off, and released.
	withClient(t, "StopReleasesAHandlerCutOffAnyWay", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		b.stopWhileRunning(t, "stripe", nil, func(context.Context) error {
			return errors.New("rpc error: code = Canceled desc = context canceled")
		})
		ev := b.event(t, id)
		if ev.State != ferry.StatePending {
			t.Fatalf("event %s after Stop cut its handler off, want pending (ledger %v)", ev.State, b.outcomes(t, id))
		}
		b.wantLedger(t, id, "[released]")
	})

	// A handler that answers with a verdict of its own after the grace
	// cancelled it is recorded by that verdict, not released.
	withClient(t, "StopKeepsAVerdictGivenAfterTheGrace", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		b.stopWhileRunning(t, "stripe", nil, func(context.Context) error {
			return ferry.Permanent(errors.New("app answered 404"))
		})
		ev := b.event(t, id)
		if ev.State != ferry.StateDead || !strings.Contains(ev.LastError, "app answered 404") {
			t.Fatalf("event %s (last error %q) after a Permanent verdict at Stop, want dead with it", ev.State, ev.LastError)
		}
		b.wantLedger(t, id, "[dead]")
	})

	// A hold source's handler cut off at Stop may have run its effect: it is
	// not released to run again, but left to lapse, and the next claim holds
	// it as unknown, as when its worker dies.
	withClient(t, "StopLeavesAHoldHandlerCutOffToLapse", true, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "bank", "evt_1")
		b.stopWhileRunning(t, "bank", []ferry.SourcePolicy{{Name: "bank", LostLease: ferry.LostLeaseHold}}, context.Context.Err)
		ev := b.event(t, id)
		if ev.State != ferry.StateInProgress {
			t.Fatalf("event %s after Stop cut its hold handler off, want still leased (ledger %v)", ev.State, b.outcomes(t, id))
		}
		b.clock.Advance(time.Hour)
		if _, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{
			Owner: "next", Limit: 1, TTL: time.Minute, HoldSources: []string{"bank"},
		}); err != nil {
			t.Fatal(err)
		}
		b.waitState(t, id, ferry.StateUnknown)
	})

	// A handler that respects its context and is still running when Stop
	// begins finishes and completes its event: Stop cancels only after the
	// grace. Without the grace the handler would see its context end and the
	// event would be released instead. A StopAndCancel before Start does
	// nothing, as a Stop then does: it does not cut that grace.
	for _, cutFirst := range []bool{false, true} {
		name := "StopLetsHandlersFinishWithinGrace"
		if cutFirst {
			name += "/AfterStopAndCancelBeforeStart"
		}
		withClient(t, name, false, func(t *testing.T, b *clientBundle) {
			id := b.receive(t, "stripe", "evt_1")
			running, stopping := make(chan struct{}), make(chan struct{})
			c := b.newClient(t, func(c *ferry.Config) { c.ShutdownGrace = time.Minute })
			if cutFirst {
				if err := c.StopAndCancel(b.ctx); err != nil {
					t.Fatal(err)
				}
			}
			c.Handle("stripe", func(ctx context.Context, _ *ferry.Delivery) error {
				close(running)
				<-stopping
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(300 * time.Millisecond): // the rest of the work
					return nil
				}
			})
			if err := c.Start(b.ctx); err != nil {
				t.Fatal(err)
			}
			<-running
			close(stopping)
			if err := c.Stop(b.ctx); err != nil {
				t.Fatal(err)
			}
			// Stop returned after the handler and its verdict: read, don't wait.
			ev := b.event(t, id)
			if ev.State != ferry.StateDone {
				t.Errorf("event %s after Stop, want done (ledger %v)", ev.State, b.outcomes(t, id))
			}
		})
	}

	// StopAndCancel cancels the running handler at once, whatever the
	// grace, and a Stop already waiting out the grace (a second stop
	// signal) goes on as if it had ended: both return once the handler
	// has, and its event is released to run again.
	for _, during := range []bool{false, true} {
		withClient(t, fmt.Sprintf("StopAndCancelCutsTheGrace/DuringStop=%v", during), false, func(t *testing.T, b *clientBundle) {
			b.receive(t, "stripe", "evt_1")
			b.receive(t, "stripe", "evt_2")
			started := make(chan int64, 2)
			c := b.newClient(t, func(c *ferry.Config) { c.Workers, c.Prefetch, c.ShutdownGrace = 1, 1, time.Hour })
			c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
				started <- d.Event.ID
				<-ctx.Done()
				return context.Cause(ctx)
			})
			if err := c.Start(b.ctx); err != nil {
				t.Fatal(err)
			}
			id := <-started
			waitFor(t, "one event running, one claimed ahead", func() bool { return b.countState(t, ferry.StateInProgress) == 2 })
			stopped := make(chan error, 1)
			if during {
				go func() { stopped <- c.Stop(b.ctx) }()
				waitFor(t, "Stop to release the event claimed ahead", func() bool { return b.countState(t, ferry.StatePending) == 1 })
			}
			// A ceiling only a Stop that waits out the hour's grace reaches.
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			defer cancel()
			if err := c.StopAndCancel(ctx); err != nil {
				t.Fatalf("StopAndCancel = %v, want nil: the handler returned once cancelled", err)
			}
			if during {
				if err := <-stopped; err != nil {
					t.Errorf("the Stop it cut short = %v, want nil", err)
				}
			}
			b.wantLedger(t, id, "[released]")
			if ev := b.event(t, id); ev.State != ferry.StatePending {
				t.Errorf("event %s after StopAndCancel, want pending", ev.State)
			}
		})
	}

	// A program that waited on its signal context stops with it, already
	// done: the handlers still get the grace, and Stop reports them all
	// returned. The event claimed ahead going back shows Stop has begun.
	withClient(t, "StopWithACtxAlreadyDoneStillGivesTheGrace", false, func(t *testing.T, b *clientBundle) {
		b.receive(t, "stripe", "evt_1")
		b.receive(t, "stripe", "evt_2")
		release, started := make(chan struct{}), make(chan int64, 2)
		c := b.newClient(t, func(c *ferry.Config) { c.Workers, c.Prefetch, c.ShutdownGrace = 1, 1, time.Minute })
		c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
			started <- d.Event.ID
			<-release
			return ctx.Err() // cancelled by a Stop that gave no grace
		})
		if err := c.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		running := <-started
		waitFor(t, "one event running, one claimed ahead", func() bool { return b.countState(t, ferry.StateInProgress) == 2 })
		sigCtx, cancel := context.WithCancel(b.ctx)
		cancel()
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(sigCtx) }()
		waitFor(t, "Stop to release the event claimed ahead", func() bool { return b.countState(t, ferry.StatePending) == 1 })
		close(release)
		if err := <-stopped; err != nil {
			t.Errorf("Stop with a ctx done on entry = %v, want nil: the handler returned within the grace", err)
		}
		ev := b.event(t, running)
		if ev.State != ferry.StateDone {
			t.Errorf("running event %s after Stop, want done (ledger %v)", ev.State, b.outcomes(t, running))
		}
	})

	// A deadline already past is the caller's spent budget, not a signal
	// context: Stop gives no grace and says so.
	withClient(t, "StopWithADeadlinePastGivesNoGrace", false, func(t *testing.T, b *clientBundle) {
		b.receive(t, "stripe", "evt_1")
		started := make(chan struct{}, 1)
		c := b.newClient(t, func(c *ferry.Config) { c.Workers, c.ShutdownGrace = 1, time.Minute })
		c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
			started <- struct{}{}
			<-ctx.Done() // returns once Stop cancels it
			return ctx.Err()
		})
		if err := c.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		<-started
		past, cancel := context.WithDeadline(b.ctx, time.Now().Add(-time.Second))
		defer cancel()
		if err := c.Stop(past); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop with a deadline past = %v, want DeadlineExceeded at once (with the grace, the cancelled handler returns and Stop says nil)", err)
		}
	})

	// A Stop called while another runs returns, as the first does, only
	// once every handler has returned (or its own ctx is done).
	// A Stop whose ctx ends first says how many events are still held, so
	// that a store closed next is not a silent repeat.
	withClient(t, "StopCutShortSaysWhatIsHeld", false, func(t *testing.T, b *clientBundle) {
		b.receive(t, "stripe", "evt_1")
		var logs testlog.Buffer
		release, running := make(chan struct{}), make(chan struct{})
		c := b.newClient(t, func(c *ferry.Config) {
			c.ShutdownGrace, c.Logger = time.Hour, slog.New(slog.NewTextHandler(&logs, nil))
		})
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { close(running); <-release; return nil })
		if err := c.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		<-running
		ctx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
		defer cancel()
		if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop with the handler still running = %v, want %v", err, context.DeadlineExceeded)
		}
		if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "held=1") {
			t.Errorf("Stop cut short logged no warning naming the held event:\n%s", got)
		}
		close(release)
		if err := c.Stop(b.ctx); err != nil {
			t.Fatal(err)
		}
	})

	withClient(t, "SecondStopWaitsForTheHandlers", false, func(t *testing.T, b *clientBundle) {
		b.receive(t, "stripe", "evt_1")
		b.receive(t, "stripe", "evt_2")
		release, running := make(chan struct{}), make(chan struct{}, 2)
		c := b.newClient(t, func(c *ferry.Config) { c.Workers, c.Prefetch, c.ShutdownGrace = 1, 1, time.Hour })
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { running <- struct{}{}; <-release; return nil })
		if err := c.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		<-running // not only claimed: a Stop before the launch would release it too
		waitFor(t, "one event running, one claimed ahead", func() bool { return b.countState(t, ferry.StateInProgress) == 2 })
		first := make(chan error, 1)
		go func() { first <- c.Stop(b.ctx) }()
		waitFor(t, "the first Stop to release the waiting event", func() bool { return b.countState(t, ferry.StatePending) == 1 })
		ctx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
		defer cancel()
		if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second Stop with the handler still running = %v, want %v", err, context.DeadlineExceeded)
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(b.ctx); err != nil {
			t.Errorf("Stop after Stop = %v, want nil", err)
		}
	})
}
