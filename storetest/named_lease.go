package storetest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

func acquire[TX any](t *testing.T, b *bundle[TX], name, owner string, ttl time.Duration) bool {
	t.Helper()
	held, err := b.store.LeaseAcquire(b.ctx, &ferry.LeaseAcquireParams{Name: name, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("LeaseAcquire(%s, %s): %v", name, owner, err)
	}
	return held
}

// testNamedLease pins LeaseAcquire and LeaseRelease: one holder at a time
// per name, on the store's clock.
func testNamedLease[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	const name, lease = "catchup:stripe", time.Minute

	run(t, setup, "FreeIsTakenHeldIsRefused", func(t *testing.T, b *bundle[TX]) {
		if !acquire(t, b, name, "a", lease) {
			t.Fatal("a could not take a free lease")
		}
		if acquire(t, b, name, "b", lease) {
			t.Fatal("b took a lease a holds")
		}
		if !acquire(t, b, "other", "b", lease) {
			t.Fatal("b could not take another name: names must be independent")
		}
	})

	run(t, setup, "OwnerRenews", func(t *testing.T, b *bundle[TX]) {
		acquire(t, b, name, "a", lease)
		b.clock.Advance(lease - time.Second)
		if !acquire(t, b, name, "a", lease) {
			t.Fatal("a could not renew its own lease")
		}
		b.clock.Advance(2 * time.Second) // past the first expiry, within the renewal
		if acquire(t, b, name, "b", lease) {
			t.Fatal("b took a renewed lease before it expired")
		}
	})

	run(t, setup, "ExpiredIsTaken", func(t *testing.T, b *bundle[TX]) {
		acquire(t, b, name, "a", lease)
		b.clock.Advance(lease)
		if !acquire(t, b, name, "b", lease) {
			t.Fatal("b could not take an expired lease")
		}
		if acquire(t, b, name, "a", lease) {
			t.Fatal("a took back a lease b now holds")
		}
	})

	run(t, setup, "ReleaseFreesOnlyTheOwners", func(t *testing.T, b *bundle[TX]) {
		acquire(t, b, name, "a", lease)
		if err := b.store.LeaseRelease(b.ctx, &ferry.LeaseReleaseParams{Name: name, Owner: "b"}); err != nil {
			t.Fatal(err)
		}
		if acquire(t, b, name, "c", lease) {
			t.Fatal("a release by a non-owner freed the lease")
		}
		if err := b.store.LeaseRelease(b.ctx, &ferry.LeaseReleaseParams{Name: name, Owner: "a"}); err != nil {
			t.Fatal(err)
		}
		if !acquire(t, b, name, "c", lease) {
			t.Fatal("c could not take a released lease")
		}
	})

	run(t, setup, "ConcurrentAcquireHasOneWinner", func(t *testing.T, b *bundle[TX]) {
		const n = 8
		var wins atomic.Int32
		atOnce(n, func(i int) {
			held, err := b.store.LeaseAcquire(b.ctx, &ferry.LeaseAcquireParams{Name: name, Owner: string(rune('a' + i)), TTL: lease})
			if err != nil {
				t.Error(err)
			}
			if held {
				wins.Add(1)
			}
		})
		if wins := wins.Load(); wins != 1 {
			t.Fatalf("%d owners hold the lease, want 1", wins)
		}
	})

	run(t, setup, "InvalidParams", func(t *testing.T, b *bundle[TX]) {
		for _, p := range []*ferry.LeaseAcquireParams{
			{Owner: "a", TTL: lease}, {Name: name, TTL: lease}, {Name: name, Owner: "a"},
		} {
			if _, err := b.store.LeaseAcquire(b.ctx, p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("LeaseAcquire(%+v) err = %v, want ErrInvalidParams", p, err)
			}
		}
	})
}

// testCheckpoint pins CheckpointGet and CheckpointPut.
func testCheckpoint[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "MissingIsNotFound", func(t *testing.T, b *bundle[TX]) {
		if _, err := b.store.CheckpointGet(b.ctx, &ferry.CheckpointGetParams{Name: "none"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("CheckpointGet(none) err = %v, want ErrNotFound", err)
		}
	})

	run(t, setup, "PutOverwrites", func(t *testing.T, b *bundle[TX]) {
		put := func(value string) {
			t.Helper()
			if err := b.store.CheckpointPut(b.ctx, &ferry.CheckpointPutParams{Name: "catchup:stripe", Value: value}); err != nil {
				t.Fatal(err)
			}
		}
		put("first")
		b.clock.Advance(time.Minute)
		put("second")
		if err := b.store.CheckpointPut(b.ctx, &ferry.CheckpointPutParams{Name: "catchup:github", Value: "other"}); err != nil {
			t.Fatal(err)
		}
		c, err := b.store.CheckpointGet(b.ctx, &ferry.CheckpointGetParams{Name: "catchup:stripe"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Name != "catchup:stripe" || c.Value != "second" {
			t.Fatalf("checkpoint = %s=%q, want catchup:stripe=\"second\"", c.Name, c.Value)
		}
		if !c.UpdatedAt.Equal(b.clock.Now()) {
			t.Fatalf("UpdatedAt = %v, want the store's now %v", c.UpdatedAt, b.clock.Now())
		}
	})

	// An instance that paused past its lease must not move back the
	// checkpoint of the one that took the work over.
	run(t, setup, "PutUnderALeaseIsFenced", func(t *testing.T, b *bundle[TX]) {
		acquire := func(owner string) {
			t.Helper()
			held, err := b.store.LeaseAcquire(b.ctx, &ferry.LeaseAcquireParams{Name: "catchup:stripe", Owner: owner, TTL: time.Minute})
			if err != nil || !held {
				t.Fatalf("LeaseAcquire(%s) = %v, %v", owner, held, err)
			}
		}
		put := func(owner, value string) error {
			return b.store.CheckpointPut(b.ctx, &ferry.CheckpointPutParams{Name: "catchup:stripe", Value: value, Lease: "catchup:stripe", Owner: owner})
		}
		acquire("a")
		if err := put("a", "a1"); err != nil {
			t.Fatalf("put by the holder: %v", err)
		}
		b.clock.Advance(time.Minute) // a's lease ends now: expired at the store's clock
		if err := put("a", "a2"); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("put after the lease expired: err = %v, want ErrLeaseLost", err)
		}
		acquire("b")
		if err := put("b", "b1"); err != nil {
			t.Fatalf("put by the new holder: %v", err)
		}
		if err := put("a", "a3"); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("put by the old holder: err = %v, want ErrLeaseLost", err)
		}
		if err := b.store.CheckpointPut(b.ctx, &ferry.CheckpointPutParams{Name: "catchup:github", Value: "g", Lease: "catchup:github", Owner: "a"}); !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("put under a lease never taken: err = %v, want ErrLeaseLost", err)
		}
		c, err := b.store.CheckpointGet(b.ctx, &ferry.CheckpointGetParams{Name: "catchup:stripe"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Value != "b1" {
			t.Fatalf("checkpoint = %q, want the new holder's \"b1\"", c.Value)
		}
		if _, err := b.store.CheckpointGet(b.ctx, &ferry.CheckpointGetParams{Name: "catchup:github"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("a refused put wrote a checkpoint: err = %v, want ErrNotFound", err)
		}
	})

	run(t, setup, "InvalidParams", func(t *testing.T, b *bundle[TX]) {
		if err := b.store.CheckpointPut(b.ctx, &ferry.CheckpointPutParams{Value: "x"}); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Fatalf("CheckpointPut without a name: err = %v, want ErrInvalidParams", err)
		}
		if err := b.store.CheckpointPut(b.ctx, &ferry.CheckpointPutParams{Name: "n", Lease: "n"}); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Fatalf("CheckpointPut with a lease and no owner: err = %v, want ErrInvalidParams", err)
		}
	})
}
