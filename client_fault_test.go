package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/testlog"
)

// faultyStore wraps a real store and breaks one behaviour at a time.
type faultyStore struct {
	ferry.Store
	hangHeartbeats bool         // EventHeartbeatMany blocks until its context ends
	closedWake     bool         // ReceiptSubscribe returns a closed channel
	failClaims     bool         // EventClaimMany fails
	failCompletes  bool         // EventCompleteMany fails
	claims         atomic.Int64 // EventClaimMany calls
}

func (s *faultyStore) EventHeartbeatMany(ctx context.Context, p *ferry.EventHeartbeatManyParams) ([]ferry.Lease, error) {
	if s.hangHeartbeats {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.EventHeartbeatMany(ctx, p)
}

func (s *faultyStore) ReceiptSubscribe(ctx context.Context) (<-chan struct{}, error) {
	if s.closedWake {
		c := make(chan struct{})
		close(c)
		return c, nil
	}
	return s.Store.ReceiptSubscribe(ctx)
}

func (s *faultyStore) EventClaimMany(ctx context.Context, p *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	s.claims.Add(1)
	if s.failClaims {
		return nil, errors.New("ferry-test: claim failed")
	}
	return s.Store.EventClaimMany(ctx, p)
}

func (s *faultyStore) EventCompleteMany(ctx context.Context, p *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	if s.failCompletes {
		return nil, errors.New("ferry-test: complete failed")
	}
	return s.Store.EventCompleteMany(ctx, p)
}

// startPolling starts a client on store, polling every 100 ms, whose
// "stripe" handler succeeds at once, and returns when it started: the pace
// of the claim loop is timed from there.
func (b *clientBundle) startPolling(t *testing.T, store ferry.Store) (began time.Time) {
	t.Helper()
	c := b.newClient(t, func(c *ferry.Config) { c.Store = store; c.PollInterval = 100 * time.Millisecond })
	c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil })
	began = time.Now()
	start(t, c)
	return began
}

// strayLost is a store whose heartbeats also report a lease they were not
// sent as lost, and count themselves.
type strayLost struct {
	ferry.Store
	beats atomic.Int64
}

func (s *strayLost) EventHeartbeatMany(ctx context.Context, p *ferry.EventHeartbeatManyParams) ([]ferry.Lease, error) {
	lost, err := s.Store.EventHeartbeatMany(ctx, p)
	s.beats.Add(1)
	return append(lost, ferry.Lease{ID: 1 << 40, Attempt: 1}), err
}

// hungClaims is a store whose claims hang until unblock closes.
type hungClaims struct {
	ferry.Store
	asked, unblock chan struct{}
	once           sync.Once
	returned       atomic.Bool
}

// slowClaim is a store whose first claim comes back after delay.
type slowClaim struct {
	ferry.Store
	delay time.Duration
	once  sync.Once
}

func (s *slowClaim) EventClaimMany(ctx context.Context, p *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	claims, err := s.Store.EventClaimMany(ctx, p)
	if len(claims) > 0 {
		s.once.Do(func() { time.Sleep(s.delay) })
	}
	return claims, err
}

func (s *hungClaims) EventClaimMany(ctx context.Context, p *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	s.once.Do(func() { close(s.asked) })
	defer s.returned.Store(true)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.unblock:
		return nil, errors.New("ferry-test: claim unblocked")
	}
}

// stuckSubscribe is a store whose ReceiptSubscribe waits for a connection
// that never comes (a database host that does not answer) until its ctx
// ends.
type stuckSubscribe struct{ ferry.Store }

func (stuckSubscribe) ReceiptSubscribe(ctx context.Context) (<-chan struct{}, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestClientFaults(t *testing.T) {
	t.Parallel()

	// A store that stops answering must not leave a handler running past its
	// lease while another worker takes the event.
	withClient(t, "HungHeartbeatsStillCancelAtTheLeaseEnd", false, func(t *testing.T, b *clientBundle) {
		b.receive(t, "stripe", "evt_1")
		store := &faultyStore{Store: b.store, hangHeartbeats: true}
		cause := make(chan error, 1)
		c := b.newClient(t, func(c *ferry.Config) { c.Store = store; c.LeaseTTL = time.Second })
		c.Handle("stripe", func(ctx context.Context, d *ferry.Delivery) error {
			if d.Attempt > 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
		start(t, c)
		wantCancelledByLostLease(t, cause)
	})

	// A completion the store never records leaves the lease to lapse, and
	// the warning says what comes of the event then: a retry, or for a hold
	// source (its effect ran) a person's decision.
	for _, tc := range []struct {
		policy ferry.LostLeasePolicy
		then   string
	}{{ferry.LostLeaseRetry, "then=retried"}, {ferry.LostLeaseHold, `then="held as unknown"`}} {
		withClient(t, "CompletionNotRecordedSaysWhatFollows/"+string(tc.policy), false, func(t *testing.T, b *clientBundle) {
			b.receive(t, "stripe", "evt_1")
			var logs testlog.Buffer
			c := b.newClient(t, func(c *ferry.Config) {
				c.Store, c.LeaseTTL = &faultyStore{Store: b.store, failCompletes: true}, time.Second
				c.Sources = []ferry.SourcePolicy{{Name: "stripe", LostLease: tc.policy}}
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil })
			start(t, c)
			waitFor(t, "a warning that the completion was not recorded", func() bool {
				return strings.Contains(logs.String(), "could not record completion")
			})
			line, _, _ := strings.Cut(logs.String()[strings.Index(logs.String(), "could not record completion"):], "\n")
			if !strings.Contains(line, "the lease will lapse") || !strings.Contains(line, tc.then) {
				t.Errorf("the warning does not say %s: %s", tc.then, line)
			}
		})
	}

	withClient(t, "StopReturnsWhenItsContextEnds", false, func(t *testing.T, b *clientBundle) {
		b.receive(t, "stripe", "evt_1")
		running, release := make(chan struct{}), make(chan struct{})
		obs := &outcomes{got: map[ferry.Outcome]int{}}
		c := b.newClient(t, func(c *ferry.Config) { c.ShutdownGrace = 10 * time.Millisecond; c.Observer = obs })
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error {
			close(running)
			<-release // ignores its context
			return nil
		})
		if err := c.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		<-running
		ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
		defer cancel()
		err := c.Stop(ctx)
		// The handler outlives Stop by design; let it end before the store
		// closes, so that the test leaves no goroutine behind.
		close(release)
		for deadline := time.Now().Add(30 * time.Second); obs.count(ferry.OutcomeDone)+obs.count(ferry.OutcomeLeaseExpired) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the released handler's attempt never ended")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want DeadlineExceeded while a handler ignores its context", err)
		}
	})

	// A claim that comes back after the lease's end on the worker's clock
	// is not run: its event is given back at once (on the store's clock,
	// which stands still here, the lease still holds), and runs under the
	// next claim, not held as unknown though nothing ran.
	withClient(t, "ClaimBackPastTheLeaseIsReleased", true, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "bank", "evt_1")
		store := &slowClaim{Store: b.store, delay: 2100 * time.Millisecond}
		c := b.newClient(t, func(c *ferry.Config) {
			c.Store, c.LeaseTTL = store, 2*time.Second
			c.Sources = []ferry.SourcePolicy{{Name: "bank", LostLease: ferry.LostLeaseHold}}
		})
		var runs atomic.Int64
		c.Handle("bank", func(context.Context, *ferry.Delivery) error { runs.Add(1); return nil })
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		// A busy machine may slow a later claim past the lease as well:
		// released again, never run.
		if got := b.outcomes(t, id); len(got) < 2 || got[0] != ferry.OutcomeReleased || got[len(got)-1] != ferry.OutcomeDone ||
			slices.Index(got, ferry.OutcomeDone) != len(got)-1 {
			t.Errorf("attempts %v, want released, then done", got)
		}
		if runs.Load() != 1 {
			t.Errorf("the handler ran %d times, want once", runs.Load())
		}
	})

	// A store that names a lease it was not sent as lost breaks its
	// contract; the worker carries on with the leases it holds.
	withClient(t, "HeartbeatNamingAStrayLease", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		store := &strayLost{Store: b.store}
		c := b.newClient(t, func(c *ferry.Config) { c.Store, c.LeaseTTL = store, 3*time.Second })
		c.Handle("stripe", func(ctx context.Context, _ *ferry.Delivery) error {
			for deadline := time.Now().Add(30 * time.Second); store.beats.Load() < 2; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					return errors.New("no heartbeat came")
				}
			}
			return ctx.Err()
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
	})

	withClient(t, "ClosedNotificationsFallBackToPolling", false, func(t *testing.T, b *clientBundle) {
		store := &faultyStore{Store: b.store, closedWake: true}
		began := b.startPolling(t, store)
		// Polling makes a claim an interval, so twelve claims take 1.1 s (a
		// busy machine only makes them slower); a loop on the closed
		// channel makes them as fast as the store answers.
		for deadline := began.Add(time.Minute); store.claims.Load() < 12; {
			if time.Now().After(deadline) {
				t.Fatalf("%d claims in a minute: the claim loop stopped", store.claims.Load())
			}
			time.Sleep(10 * time.Millisecond) // polling interval, not a proof
		}
		if elapsed := time.Since(began); elapsed < 500*time.Millisecond {
			t.Fatalf("12 claims in %v with a closed notification channel: the claim loop spins", elapsed)
		}
		id := b.receive(t, "stripe", "evt_after")
		b.waitState(t, id, ferry.StateDone) // found by polling
	})

	// A store whose claims fail while receipts still commit gets claims at
	// the poll's backoff, not one per receipt signal: six claims take at
	// least five poll intervals (a busy machine only slows them).
	withClient(t, "FailingClaimsWaitForTheBackoff", false, func(t *testing.T, b *clientBundle) {
		store := &faultyStore{Store: b.store, failClaims: true}
		began := b.startPolling(t, store)
		for i := 0; store.claims.Load() < 6; i++ {
			if time.Since(began) > time.Minute {
				t.Fatalf("%d claims in a minute: the claim loop stopped", store.claims.Load())
			}
			b.receive(t, "stripe", fmt.Sprint("evt_", i)) // a signal each
		}
		if elapsed := time.Since(began); elapsed < 500*time.Millisecond {
			t.Fatalf("6 failing claims in %v: receipt signals bypass the backoff", elapsed)
		}
	})

	// The poll finds what falls due without a signal (a retry's delay
	// running out) even while jobs finish more often than PollInterval:
	// finishing jobs must not keep putting it off. The retry is done while
	// the finishes still go on.
	withClient(t, "PollNotPutOffByFinishingJobs", true, func(t *testing.T, b *clientBundle) {
		const slow = 100
		for i := range slow {
			b.receive(t, "slow", fmt.Sprint("evt_", i))
		}
		flaky := b.receive(t, "flaky", "evt_flaky")
		tick := make(chan struct{})
		c := b.newClient(t, func(c *ferry.Config) { c.Workers, c.PollInterval = 2*slow, 100*time.Millisecond })
		c.Handle("slow", doneOn(tick))
		c.Handle("flaky", func(_ context.Context, d *ferry.Delivery) error {
			if d.Attempt == 1 {
				return ferry.RetryAfter(errors.New("transient"), time.Hour)
			}
			return nil
		})
		start(t, c)
		waitFor(t, "the first attempt's failure", func() bool {
			ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: flaky})
			return err == nil && ev.State == ferry.StatePending && ev.Attempt == 1
		})
		b.clock.Advance(2 * time.Hour) // due now; no receipt signal says so
		released := 0
		for ; released < slow; released++ {
			if ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: flaky}); err == nil && ev.State == ferry.StateDone {
				break
			}
			tick <- struct{}{} // a job finishes every 20 ms
			time.Sleep(20 * time.Millisecond)
		}
		if released == slow {
			t.Fatalf("the retry was not done while %d jobs finished 20 ms apart with a 100 ms poll: finishing jobs put the poll off", slow)
		}
		close(tick)
	})

	// A handler that ends its goroutine (runtime.Goexit, as t.FailNow does)
	// fails its attempt; its lease is not kept alive for ever, and the
	// retry runs.
	withClient(t, "HandlerGoexitFailsTheAttempt", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		c := b.newClient(t, nil)
		c.Handle("stripe", func(_ context.Context, d *ferry.Delivery) error {
			if d.Attempt == 1 {
				runtime.Goexit()
			}
			return nil
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		b.wantLedger(t, id, "[failed done]")
	})

	// Stop keeps to its ctx while a claim hangs (a stalled database at
	// shutdown): it returns at the deadline, not when the claim gives up.
	withClient(t, "StopKeepsItsDeadlineWhileAClaimHangs", false, func(t *testing.T, b *clientBundle) {
		store := &hungClaims{Store: b.store, asked: make(chan struct{}), unblock: make(chan struct{})}
		c := b.newClient(t, func(c *ferry.Config) { c.Store = store; c.ShutdownGrace = time.Millisecond })
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil })
		start(t, c)
		t.Cleanup(func() { close(store.unblock) }) // before start's Stop
		<-store.asked
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) || store.returned.Load() {
			t.Fatalf("Stop = %v with the claim returned: %v; want the deadline while the claim still hangs", err, store.returned.Load())
		}
	})

	// A requeued event's retries back off from RetryBase again: the
	// backoff grows with the attempts of its new budget, not with every
	// attempt it ever had.
	withClient(t, "BackoffStartsAgainAfterARequeue", true, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		for state := ferry.StatePending; state != ferry.StateDead; {
			claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w0", Limit: 1, TTL: time.Minute})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim = %v, %v", claims, err)
			}
			if state, err = b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: claims[0].Event.Lease(), Error: "old", MaxAttempts: 20}); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{id}, Actor: "op"}); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		c := b.newClient(t, func(c *ferry.Config) { c.RetryBase, c.RetryCap = time.Millisecond, time.Hour })
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return errors.New("transient") })
		start(t, c)
		var ev *ferry.Event
		waitFor(t, "a failure after the requeue", func() bool {
			var err error
			ev, err = b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id})
			return err == nil && ev.Attempt > 20 && ev.State == ferry.StatePending
		})
		// RetryBase is 1ms: a few failures in, the delay is still under a
		// second; grown from attempt 21 it would be up to 17 minutes.
		if delay := ev.NextAttemptAt.Sub(b.clock.Now()); delay > time.Second {
			t.Fatalf("attempt %d after a requeue at attempt 20 waits %v", ev.Attempt, delay)
		}
	})

	// Start returns at once and Stop ends it even while the subscription
	// to receipts waits for a database that does not answer.
	withClient(t, "StartAndStopDoNotWaitForTheSubscription", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, func(c *ferry.Config) { c.Store = stuckSubscribe{b.store} })
		c.Handle("stripe", func(context.Context, *ferry.Delivery) error { return nil })
		returned := make(chan error, 2)
		go func() { returned <- c.Start(context.Background()) }()
		select {
		case err := <-returned:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute): // a ceiling only a hang reaches
			t.Fatal("Start waits for the receipt subscription")
		}
		go func() { returned <- c.Stop(context.Background()) }()
		select {
		case err := <-returned:
			if err != nil {
				t.Fatalf("Stop = %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Stop waits for the receipt subscription")
		}
	})

}
