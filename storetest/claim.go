package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testClaim checks EventClaimMany: what is due, in which order, under which lease.
func testClaim[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "LeasesFromTheStoreClock", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		c := claimOne(t, b, "w1")
		now := b.clock.Now()
		ev := c.Event
		if ev.ID != id || ev.State != ferry.StateInProgress || ev.Attempt != 1 || ev.LeaseOwner != "w1" {
			t.Fatalf("claimed %+v", ev)
		}
		if !ev.LeaseExpiresAt.Equal(now.Add(ttl)) || !ev.ClaimedAt.Equal(now) {
			t.Errorf("lease expires %v claimed %v, want %v and %v", ev.LeaseExpiresAt, ev.ClaimedAt, now.Add(ttl), now)
		}
		if string(ev.Payload) != `{"id":"evt_1"}` || ev.Headers.Get("Content-Type") != "application/json" {
			t.Errorf("claim lacks payload or headers: %q %v", ev.Payload, ev.Headers)
		}
		if c.PreviousUnfinished || c.Reclaimed {
			t.Errorf("first claim: previous unfinished %v reclaimed %v", c.PreviousUnfinished, c.Reclaimed)
		}
		stored := wantState(t, b, id, ferry.StateInProgress)
		if stored.Attempt != 1 || !stored.LeaseExpiresAt.Equal(ev.LeaseExpiresAt) {
			t.Errorf("stored attempt %d lease %v", stored.Attempt, stored.LeaseExpiresAt)
		}
		ledger := attempts(t, b, id)
		if len(ledger) != 1 || ledger[0].Attempt != 1 || ledger[0].Worker != "w1" || ledger[0].Outcome != ferry.OutcomeRunning ||
			!ledger[0].StartedAt.Equal(now) || !ledger[0].FinishedAt.IsZero() {
			t.Fatalf("ledger = %+v", ledger)
		}
	})

	run(t, setup, "OldestDueFirstWithinLimit", func(t *testing.T, b *bundle[TX]) {
		var ids []int64
		for i := range 5 {
			ids = append(ids, receive(t, b, "stripe", fmt.Sprint("evt_", i)))
			b.clock.Advance(time.Second)
		}
		got := claim(t, b, "w1", 3)
		if len(got) != 3 {
			t.Fatalf("claimed %d, want 3", len(got))
		}
		for i, c := range got {
			if c.Event.ID != ids[i] {
				t.Errorf("claim %d = event %d, want %d", i, c.Event.ID, ids[i])
			}
		}
		rest := claim(t, b, "w2", 10)
		if len(rest) != 2 || rest[0].Event.ID != ids[3] || rest[1].Event.ID != ids[4] {
			t.Fatalf("second claim = %d events", len(rest))
		}
		if again := claim(t, b, "w3", 10); len(again) != 0 {
			t.Fatalf("leased events claimed again: %d", len(again))
		}
	})

	run(t, setup, "SourcesFilter", func(t *testing.T, b *bundle[TX]) {
		receive(t, b, "stripe", "evt_1")
		gh := receive(t, b, "github", "evt_1")
		got := claim(t, b, "w1", 10, "github")
		if len(got) != 1 || got[0].Event.ID != gh {
			t.Fatalf("claimed %d events from github filter", len(got))
		}
	})

	run(t, setup, "NotYetDueIsSkipped", func(t *testing.T, b *bundle[TX]) {
		receive(t, b, "stripe", "evt_1")
		c := claimOne(t, b, "w1")
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), RetryDelay: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, b, "w1", 10); len(got) != 0 {
			t.Fatalf("claimed an event before its next attempt time")
		}
		b.clock.Advance(time.Minute)
		if got := claim(t, b, "w1", 10); len(got) != 1 || got[0].Event.Attempt != 2 {
			t.Fatalf("due event not claimed: %d", len(got))
		}
	})

	run(t, setup, "EmptyInbox", func(t *testing.T, b *bundle[TX]) {
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

	run(t, setup, "HoldWithinASourceFilter", func(t *testing.T, b *bundle[TX]) {
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

	// PreviousUnfinished looks back past releases (they never ran the
	// handler, or gave it up) to the last attempt that ran: a release after
	// a lapse hides nothing, and only a reported end clears it.
	run(t, setup, "PreviousUnfinishedSurvivesARelease", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		claimOne(t, b, "w1")
		b.clock.Advance(ttl)
		second := claimOne(t, b, "w2")
		if !second.PreviousUnfinished || !second.Reclaimed {
			t.Fatalf("reclaim after a lapse: previous unfinished %v reclaimed %v, want both", second.PreviousUnfinished, second.Reclaimed)
		}
		if err := b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: second.Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		// Unfinished, but not reclaimed: no lease lapsed under this claim.
		third := claimOne(t, b, "w3")
		if third.Event.Attempt != 3 || !third.PreviousUnfinished || third.Reclaimed {
			t.Errorf("claim after lapse and release: attempt %d previous unfinished %v reclaimed %v, want 3, true, false",
				third.Event.Attempt, third.PreviousUnfinished, third.Reclaimed)
		}
		wantOutcomes(t, b, id, ferry.OutcomeLeaseExpired, ferry.OutcomeReleased, ferry.OutcomeRunning)
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: third.Event.Lease(), Error: "e"}); err != nil {
			t.Fatal(err)
		}
		if fourth := claimOne(t, b, "w4"); fourth.PreviousUnfinished || fourth.Reclaimed {
			t.Errorf("claim after a failed attempt: attempt %d previous unfinished %v reclaimed %v", fourth.Event.Attempt, fourth.PreviousUnfinished, fourth.Reclaimed)
		}
	})

	// A replay does not clear PreviousUnfinished: an unknown event's last
	// attempt lapsed, so its effect may have run whatever a person decided,
	// and the handler checks again. A done event's replay says false, even
	// with a lapse earlier in its ledger (on PostgreSQL, back from the
	// archive with it).
	run(t, setup, "PreviousUnfinishedAcrossAReplay", func(t *testing.T, b *bundle[TX]) {
		unknown := makeUnknown(t, b, "evt_unknown")
		done := receive(t, b, "stripe", "evt_done")
		mustComplete(t, b, claimOne(t, b, "w1").Event.Lease())
		lapsedThenDone := receive(t, b, "stripe", "evt_lapsed_then_done")
		claimOne(t, b, "w1")
		b.clock.Advance(ttl)
		if c := claimOne(t, b, "w2"); !c.PreviousUnfinished {
			t.Fatal("reclaim after a lapse does not say the earlier attempt was unfinished")
		} else {
			mustComplete(t, b, c.Event.Lease())
		}
		ids := []int64{unknown, done, lapsedThenDone}
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: ids, States: ferry.States, Actor: "op"}); err != nil || n != 3 {
			t.Fatalf("requeue = %d, %v; want 3", n, err)
		}
		want := map[int64]bool{unknown: true, done: false, lapsedThenDone: false}
		claims := claim(t, b, "w3", 10)
		if len(claims) != len(want) {
			t.Fatalf("claimed %d replayed events, want %d", len(claims), len(want))
		}
		for _, c := range claims {
			if c.PreviousUnfinished != want[c.Event.ID] || c.Reclaimed {
				t.Errorf("replayed %s: previous unfinished %v reclaimed %v, want %v and false", c.Event.EventID, c.PreviousUnfinished, c.Reclaimed, want[c.Event.ID])
			}
		}
		wantOutcomes(t, b, unknown, ferry.OutcomeLeaseExpired, ferry.OutcomeRunning)
	})

	run(t, setup, "StopsAtMaxBytesButTakesTheFirst", func(t *testing.T, b *bundle[TX]) {
		var ids []int64
		for i := range 5 {
			ids = append(ids, receive(t, b, "stripe", fmt.Sprint("evt_", i))) // 14-byte payloads
			b.clock.Advance(time.Second)
		}
		claimBytes := func(maxBytes int64) []int64 {
			t.Helper()
			claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w1", Limit: 10, TTL: ttl, MaxBytes: maxBytes})
			if err != nil {
				t.Fatalf("EventClaimMany(max bytes %d): %v", maxBytes, err)
			}
			var got []int64
			for _, c := range claims {
				got = append(got, c.Event.ID)
			}
			return got
		}
		if got := claimBytes(28); !slices.Equal(got, ids[:2]) {
			t.Errorf("claim of at most 28 bytes = %v, want the two oldest %v", got, ids[:2])
		}
		if got := claimBytes(1); !slices.Equal(got, ids[2:3]) {
			t.Errorf("claim of at most 1 byte = %v, want the oldest due %v however large", got, ids[2:3])
		}
		if got := claimBytes(0); !slices.Equal(got, ids[3:]) {
			t.Errorf("claim without a byte bound = %v, want the rest %v", got, ids[3:])
		}
	})
}
