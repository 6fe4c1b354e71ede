package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testPurge checks EventPurge: only done events past the retention, with their ledger and conflicts.
func testPurge[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "KeepsTheReplayWindow", func(t *testing.T, b *bundle[TX]) {
		old := receive(t, b, "stripe", "old")
		fresh := receive(t, b, "stripe", "fresh")
		for range 2 {
			lease := claimOne(t, b, "w1").Event.Lease()
			mustComplete(t, b, lease)
		}
		// Both are done; a day later fresh is replayed and done again, so it is younger.
		b.clock.Advance(24 * time.Hour)
		if err := requeueAndComplete(b, fresh); err != nil {
			t.Fatal(err)
		}
		pending := receive(t, b, "stripe", "pending")
		other := receive(t, b, "github", "old")
		lease := claim(t, b, "w1", 1, "github")[0].Event.Lease()
		mustComplete(t, b, lease)

		_, err := b.store.EventPurge(b.ctx, &ferry.EventPurgeParams{Source: "stripe", Retention: 71 * time.Hour, ReplayWindow: 72 * time.Hour})
		if !errors.Is(err, ferry.ErrRetentionTooShort) {
			t.Fatalf("purge below the replay window: err = %v, want ErrRetentionTooShort", err)
		}
		b.clock.Advance(72*time.Hour - 24*time.Hour)
		n, err := b.store.EventPurge(b.ctx, &ferry.EventPurgeParams{Source: "stripe", Retention: 72 * time.Hour, ReplayWindow: 72 * time.Hour})
		if err != nil || n != 1 {
			t.Fatalf("purge = %d, %v; want 1", n, err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: old}); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("purged event still there: %v", err)
		}
		if got := attempts(t, b, old); len(got) != 0 {
			t.Errorf("purged event's ledger remains: %d rows", len(got))
		}
		wantState(t, b, fresh, ferry.StateDone)
		wantState(t, b, pending, ferry.StatePending)
		wantState(t, b, other, ferry.StateDone)
	})

	run(t, setup, "PurgeAtRetentionWithConflicts", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "s", "e")
		receiveWith(t, b, &ferry.EventReceiveParams{Source: "s", EventID: "e", Payload: []byte("different")})
		pending := receive(t, b, "s", "pending")
		lease := claimOne(t, b, "w").Event.Lease()
		mustComplete(t, b, lease)
		// Another source's event done at the same moment is not s's to purge.
		other := receive(t, b, "t", "e")
		mustComplete(t, b, claim(t, b, "w", 1, "t")[0].Event.Lease())
		purgeAtRetention(t, b, "s", id)
		wantState(t, b, other, ferry.StateDone)
		if got, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id}); err != nil || len(got) != 0 {
			t.Errorf("purged event's conflicts = %+v, %v; want none", got, err)
		}
		wantState(t, b, pending, ferry.StatePending)
		// Its key went at the same retention: the id is new again.
		if res := receiveWith(t, b, &ferry.EventReceiveParams{Source: "s", EventID: "e", Payload: []byte("e")}); res.Outcome != ferry.ReceiveNew {
			t.Errorf("a delivery of the purged id = %s, want new: its key outlived the event", res.Outcome)
		}
	})
}

// purgeAtRetention purges source, whose one done event id completed at the
// clock's now, with a day's retention: nothing a second before the day
// ends, id at its end.
func purgeAtRetention[TX any](t *testing.T, b *bundle[TX], source string, id int64) {
	t.Helper()
	params := &ferry.EventPurgeParams{Source: source, Retention: 24 * time.Hour, ReplayWindow: time.Hour}
	b.clock.Advance(24*time.Hour - time.Second)
	if n, err := b.store.EventPurge(b.ctx, params); err != nil || n != 0 {
		t.Fatalf("purge a second before retention = %d, %v; want 0", n, err)
	}
	b.clock.Advance(time.Second)
	if n, err := b.store.EventPurge(b.ctx, params); err != nil || n != 1 {
		t.Fatalf("purge at retention = %d, %v; want 1", n, err)
	}
	if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id}); !errors.Is(err, ferry.ErrNotFound) {
		t.Fatalf("purged event: err = %v, want ErrNotFound", err)
	}
}
