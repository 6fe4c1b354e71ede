package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

func testCompleteTx[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], newEffects func(*testing.T, ferry.TxStore[TX]) Effects[TX]) {
	// work is a transactional handler: its effect and the fenced done commit
	// together or not at all.
	work := func(b *bundle[TX], fx Effects[TX], lease ferry.Lease, key string) error {
		return b.store.InTx(b.ctx, func(tx TX) error {
			if err := fx.Insert(b.ctx, tx, key); err != nil {
				return err
			}
			return b.store.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: lease})
		})
	}
	count := func(t *testing.T, b *bundle[TX], fx Effects[TX], key string) int {
		t.Helper()
		n, err := fx.Count(b.ctx, key)
		if err != nil {
			t.Fatalf("count effects of %s: %v", key, err)
		}
		return n
	}

	run(t, setup, "EffectCommitsWithDone", func(t *testing.T, b *bundle[TX]) {
		fx := newEffects(t, b.store)
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		if err := work(b, fx, lease, "evt_1"); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, id, ferry.StateDone)
		wantOutcomes(t, b, id, ferry.OutcomeDone)
		if n := count(t, b, fx, "evt_1"); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
	})

	run(t, setup, "LostLeaseRollsBackTheEffect", func(t *testing.T, b *bundle[TX]) {
		fx := newEffects(t, b.store)
		id := receive(t, b, "stripe", "evt_1")
		zombie := claimOne(t, b, "zombie").Event.Lease()
		b.clock.Advance(ttl)
		live := claimOne(t, b, "w2").Event.Lease()
		wantLeaseLost(t, "zombie's transaction", work(b, fx, zombie, "evt_1"))
		if n := count(t, b, fx, "evt_1"); n != 0 {
			t.Fatalf("a fenced-out handler's effect was committed: %d rows", n)
		}
		if err := work(b, fx, live, "evt_1"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, b, fx, "evt_1"); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
		wantOutcomes(t, b, id, ferry.OutcomeLeaseExpired, ferry.OutcomeDone)
	})

	run(t, setup, "ExactlyOnceUnderRacingZombies", func(t *testing.T, b *bundle[TX]) {
		fx := newEffects(t, b.store)
		const n = 40
		for i := range n {
			receive(t, b, "stripe", fmt.Sprint("evt_", i))
		}
		zombies := claim(t, b, "zombie", n)
		if len(zombies) != n {
			t.Fatalf("zombie claimed %d, want %d", len(zombies), n)
		}
		b.clock.Advance(ttl) // the zombie stalls past its leases

		var wg sync.WaitGroup
		for _, z := range zombies {
			wg.Go(func() {
				err := work(b, fx, z.Event.Lease(), z.Event.EventID)
				if !errors.Is(err, ferry.ErrLeaseLost) {
					t.Errorf("zombie completed %s: %v", z.Event.EventID, err)
				}
			})
		}
		for w := range 4 {
			wg.Go(func() {
				claimUntilEmpty(t, b.ctx, b, fmt.Sprint("w", w), 5, func(c *ferry.Claim) {
					if err := work(b, fx, c.Event.Lease(), c.Event.EventID); err != nil {
						t.Errorf("live worker on %s: %v", c.Event.EventID, err)
					}
				})
			})
		}
		wg.Wait()
		for i := range n {
			key := fmt.Sprint("evt_", i)
			if got := count(t, b, fx, key); got != 1 {
				t.Errorf("%s has %d effects, want exactly 1", key, got)
			}
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateDone}, Limit: 1000})
		if err != nil || len(page.Events) != n {
			t.Fatalf("%d events done, want %d (%v)", len(page.Events), n, err)
		}
	})

	run(t, setup, "FencedTransactionRollsBack", func(t *testing.T, b *bundle[TX]) {
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
}

// claimUntilEmpty claims up to limit events at a time as owner and hands
// each claim to handle, until a claim finds none or ctx ends.
func claimUntilEmpty[TX any](t *testing.T, ctx context.Context, b *bundle[TX], owner string, limit int, handle func(*ferry.Claim)) {
	for ctx.Err() == nil {
		claims, err := b.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: owner, Limit: limit, TTL: ttl})
		if err != nil {
			t.Error(err)
			return
		}
		if len(claims) == 0 {
			return
		}
		for _, c := range claims {
			handle(c)
		}
	}
}

// testConcurrency: many claimers never hold one event at once, and every
// event ends done exactly once.
func testConcurrency[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("ClaimersNeverShareAnEvent", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("2,000 events; skipped with -short")
		}
		b := setup(t)
		const events, workers = 2000, 8
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute) // a hang guard; CI machines vary
		defer cancel()
		ids := make([]int64, 0, events)
		var mu sync.Mutex
		var receiveWG sync.WaitGroup
		for w := range 4 {
			receiveWG.Go(func() {
				for i := w; i < events; i += 4 {
					res, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: fmt.Sprint("evt_", i), Payload: []byte("{}")})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					ids = append(ids, res.ID)
					mu.Unlock()
				}
			})
		}
		receiveWG.Wait()
		if t.Failed() {
			return
		}

		holder := map[int64]string{}
		completed := map[int64]int{}
		var wg sync.WaitGroup
		for w := range workers {
			owner := fmt.Sprint("w", w)
			wg.Go(func() {
				claimUntilEmpty(t, ctx, b, owner, 10, func(c *ferry.Claim) {
					id := c.Event.ID
					mu.Lock()
					if other, held := holder[id]; held {
						t.Errorf("event %d claimed by %s while %s holds it", id, owner, other)
					}
					holder[id] = owner
					mu.Unlock()
					if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
						t.Errorf("complete %d: %v", id, err)
					}
					mu.Lock()
					delete(holder, id)
					completed[id]++
					mu.Unlock()
				})
			})
		}
		wg.Wait()
		if len(completed) != events {
			t.Fatalf("%d events completed, want %d", len(completed), events)
		}
		for _, id := range ids {
			if completed[id] != 1 {
				t.Errorf("event %d completed %d times", id, completed[id])
			}
		}
		for _, id := range ids {
			ledger := attempts(t, b, id)
			if len(ledger) != 1 || ledger[0].Outcome != ferry.OutcomeDone {
				t.Fatalf("event %d ledger = %+v, want one done attempt", id, ledger)
			}
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{States: []ferry.State{ferry.StatePending, ferry.StateInProgress}})
		if err != nil || len(page.Events) != 0 {
			t.Fatalf("%d events left unfinished (%v)", len(page.Events), err)
		}
	})
}
