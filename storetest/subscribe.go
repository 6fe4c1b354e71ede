package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// wakeCeiling bounds the wait for a wake-up: generous, so that only a store
// that never signals exceeds it, however busy the machine.
const wakeCeiling = 60 * time.Second

// testSubscribe checks ReceiptSubscribe's one wake-up rule (ferry.Store):
// a subscriber is woken whenever an event enters pending, by a new receipt,
// a requeue, a release or a failure sent back, and by nothing else; the
// channel closes with ctx and with the store.
func testSubscribe[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], closeStore func(ferry.TxStore[TX])) {
	subscribe := func(t *testing.T, b *bundle[TX]) <-chan struct{} {
		t.Helper()
		ctx, cancel := context.WithCancel(b.ctx)
		t.Cleanup(cancel)
		wake, err := b.store.ReceiptSubscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return wake
	}

	claimedLease := func(t *testing.T, b *bundle[TX]) ferry.Lease {
		receive(t, b, "stripe", "evt_1")
		return claimOne(t, b, "w1").Event.Lease()
	}

	// Each case prepares the store, subscribes only then (so no earlier
	// change can be the signal it sees) and makes one change that wakes.
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, b *bundle[TX]) ferry.Lease
		act     func(t *testing.T, b *bundle[TX], lease ferry.Lease) error
	}{
		{
			name: "Receive",
			act: func(t *testing.T, b *bundle[TX], _ ferry.Lease) error {
				receive(t, b, "stripe", "evt_new")
				return nil
			},
		},
		{
			name: "ReceiveMany",
			act: func(t *testing.T, b *bundle[TX], _ ferry.Lease) error {
				_, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
					{Source: "stripe", EventID: "evt_a"}, {Source: "stripe", EventID: "evt_b"},
				}})
				return err
			},
		},
		{
			name: "Requeue",
			prepare: func(t *testing.T, b *bundle[TX]) ferry.Lease {
				receive(t, b, "stripe", "evt_1")
				if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: claimOne(t, b, "w1").Event.Lease(), Dead: true}); err != nil {
					t.Fatal(err)
				}
				return ferry.Lease{}
			},
			act: func(t *testing.T, b *bundle[TX], _ ferry.Lease) error {
				_, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Source: "stripe", Actor: "op"})
				return err
			},
		},
		{
			name:    "Release",
			prepare: claimedLease,
			act: func(t *testing.T, b *bundle[TX], lease ferry.Lease) error {
				return b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: lease})
			},
		},
		{
			name:    "FailBackToPending",
			prepare: claimedLease,
			act: func(t *testing.T, b *bundle[TX], lease ferry.Lease) error {
				state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Error: "boom"})
				if err == nil && state != ferry.StatePending {
					err = fmt.Errorf("fail went %s, want pending", state)
				}
				return err
			},
		},
		{
			name:    "FailManyBackToPending",
			prepare: claimedLease,
			act: func(t *testing.T, b *bundle[TX], lease ferry.Lease) error {
				states, err := b.store.EventFailMany(b.ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: lease, Error: "boom"}}})
				if err == nil && (len(states) != 1 || states[0] != ferry.StatePending) {
					err = fmt.Errorf("fail many went %v, want pending", states)
				}
				return err
			},
		},
	} {
		run(t, setup, "WakesOn"+tc.name, func(t *testing.T, b *bundle[TX]) {
			var lease ferry.Lease
			if tc.prepare != nil {
				lease = tc.prepare(t, b)
			}
			wake := subscribe(t, b)
			if err := tc.act(t, b, lease); err != nil {
				t.Fatal(err)
			}
			WaitWake(t, wake)
		})
	}

	// A change that puts no event in pending does not wake. The check reads
	// the channel once every change has returned: exact where signals are
	// sent before the write returns (SQLite); where they travel
	// asynchronously (PostgreSQL's NOTIFY) it can miss a wrong signal, so
	// package postgres proves the same absence by order
	// (TestReceiptSubscribe/OnlyClaimableChangesNotify: a marker NOTIFY sent
	// after these changes arrives first).
	run(t, setup, "NothingElseWakes", func(t *testing.T, b *bundle[TX]) {
		done := receive(t, b, "stripe", "evt_done")
		dead := receive(t, b, "stripe", "evt_dead")
		receive(t, b, "stripe", "evt_waiting")
		wake := subscribe(t, b)

		if res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_done"}); err != nil || res.Outcome == ferry.ReceiveNew {
			t.Fatalf("redelivery = %+v, %v", res, err)
		}
		claims := claim(t, b, "w1", 2)
		for _, c := range claims {
			if _, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: c.Event.Lease(), TTL: ttl}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.store.EventHeartbeatMany(b.ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{c.Event.Lease()}, TTL: ttl}); err != nil {
				t.Fatal(err)
			}
			var err error
			switch c.Event.ID {
			case done:
				err = b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()})
			case dead:
				_, err = b.store.EventFailMany(b.ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: c.Event.Lease(), Dead: true}}})
			default:
				t.Fatalf("claimed event %d, want %d and %d", c.Event.ID, done, dead)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Source: "github", Actor: "op"}); err != nil || n != 0 {
			t.Fatalf("requeue of nothing = %d, %v", n, err)
		}
		select {
		case <-wake:
			t.Fatal("woken by a change that put no event in pending")
		default:
		}
	})

	// Writers never wait for a subscriber that does not read, and the
	// signals they leave coalesce instead of queueing one per change.
	run(t, setup, "WritersDoNotWaitAndSignalsCoalesce", func(t *testing.T, b *bundle[TX]) {
		wake := subscribe(t, b)
		const changes = 20
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			for i := range changes {
				receive(t, b, "stripe", fmt.Sprint("evt_", i))
			}
		}()
		select {
		case <-wrote:
		case <-time.After(time.Minute):
			t.Fatal("receipts still blocked after a minute: they wait for the subscriber")
		}
		got := 0
		WaitWake(t, wake)
		for got = 1; ; got++ {
			select {
			case <-wake:
				continue
			default:
			}
			break
		}
		if got >= changes {
			t.Fatalf("%d signals for %d changes: they queued instead of coalescing", got, changes)
		}
	})

	run(t, setup, "ClosesWhenCtxIsDone", func(t *testing.T, b *bundle[TX]) {
		ctx, cancel := context.WithCancel(b.ctx)
		wake, err := b.store.ReceiptSubscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		waitClosed(t, wake)
	})

	t.Run("ClosesWhenTheStoreCloses", func(t *testing.T) {
		t.Parallel()
		if closeStore == nil {
			t.Skip("Harness.Close is not set")
		}
		b := setup(t)
		wake := subscribe(t, b)
		closeStore(b.store)
		waitClosed(t, wake)
	})
}

// WaitWake fails t unless wake, a channel from ReceiptSubscribe, delivers a
// wake-up within a ceiling generous enough for a busy machine; a closed
// channel fails it too.
func WaitWake(t testing.TB, wake <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-wake:
		if !ok {
			t.Fatal("wake-up channel closed")
		}
	case <-time.After(wakeCeiling):
		t.Fatalf("no wake-up within %s", wakeCeiling)
	}
}

// waitClosed drains wake until it closes.
func waitClosed(t *testing.T, wake <-chan struct{}) {
	t.Helper()
	deadline := time.After(wakeCeiling)
	for {
		select {
		case _, ok := <-wake:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("channel still open %s later", wakeCeiling)
		}
	}
}
