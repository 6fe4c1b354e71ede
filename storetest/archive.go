package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testArchive checks ArchiveMaintain and ArchiveInfo: retention for every
// source at once, whatever the store keeps done events in (partitions
// dropped whole, or rows deleted in batches), never a live event, never a
// dedupe key younger than KeyRetention.
func testArchive[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	// history leaves, at the clock's start T0, old (stripe) done at T0,
	// recent (github) done at T0+25h, pending (stripe) never claimed, and
	// the clock at T0+72h: old is past a 48-hour retention plus a day's
	// partition, recent is inside it.
	type ids struct{ old, recent, pending int64 }
	history := func(t *testing.T, b *bundle[TX]) ids {
		t.Helper()
		var got ids
		got.old = receive(t, b, "stripe", "old")
		mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		// A first run sets the archive up while old is fresh: it stays.
		res, err := b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour})
		if err != nil || res.Skipped || res.Events != 0 || res.Keys != 0 {
			t.Fatalf("ArchiveMaintain at once = %+v, %v; want nothing dropped", res, err)
		}
		wantState(t, b, got.old, ferry.StateDone)
		b.clock.Advance(25 * time.Hour)
		got.recent = receive(t, b, "github", "recent")
		mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		got.pending = receive(t, b, "stripe", "pending")
		b.clock.Advance(47 * time.Hour)
		return got
	}

	run(t, setup, "DropsPastRetention", func(t *testing.T, b *bundle[TX]) {
		h := history(t, b)
		res, err := b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour})
		if err != nil || res.Skipped || res.Events != 1 {
			t.Fatalf("ArchiveMaintain = %+v, %v; want one event dropped", res, err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: h.old}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("event past retention: err = %v, want ErrNotFound", err)
		}
		if got := attempts(t, b, h.old); len(got) != 0 {
			t.Errorf("dropped event's ledger remains: %d rows", len(got))
		}
		wantState(t, b, h.recent, ferry.StateDone)
		wantState(t, b, h.pending, ferry.StatePending)
		if got := claimOne(t, b, "w"); got.Event.ID != h.pending {
			t.Fatalf("claimed %d after maintenance, want the pending %d", got.Event.ID, h.pending)
		}
		// Run again: nothing more is past retention.
		if res, err := b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour}); err != nil || res.Skipped || res.Events != 0 {
			t.Fatalf("second ArchiveMaintain = %+v, %v; want nothing dropped", res, err)
		}
	})

	// One instance at a time: a run skips while another owner holds
	// ArchiveLease, and gives the lease up when it ends.
	run(t, setup, "UnderTheLease", func(t *testing.T, b *bundle[TX]) {
		h := history(t, b)
		other := &ferry.LeaseAcquireParams{Name: ferry.ArchiveLease, Owner: "other", TTL: time.Hour}
		if held, err := b.store.LeaseAcquire(b.ctx, other); err != nil || !held {
			t.Fatalf("LeaseAcquire(other) = %v, %v", held, err)
		}
		res, err := b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour})
		if err != nil || !res.Skipped || res.Events != 0 {
			t.Fatalf("ArchiveMaintain beside the lease's holder = %+v, %v; want skipped", res, err)
		}
		wantState(t, b, h.old, ferry.StateDone)
		if err := b.store.LeaseRelease(b.ctx, &ferry.LeaseReleaseParams{Name: ferry.ArchiveLease, Owner: "other"}); err != nil {
			t.Fatal(err)
		}
		res, err = b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour})
		if err != nil || res.Skipped || res.Events != 1 {
			t.Fatalf("ArchiveMaintain with the lease free = %+v, %v; want one event dropped", res, err)
		}
		if held, err := b.store.LeaseAcquire(b.ctx, other); err != nil || !held {
			t.Fatalf("after the run, LeaseAcquire(other) = %v, %v; want the lease given up", held, err)
		}
	})

	// A run that outlives the lease stops at its next step with
	// ErrLeaseLost (ferry.MaintainArchive's renew, which both stores'
	// ArchiveMaintain run under), and leaves the new holder's lease alone.
	run(t, setup, "StopsWhenTheLeasePasses", func(t *testing.T, b *bundle[TX]) {
		steps := 0
		maintain := func(ctx context.Context, _ *ferry.ArchiveMaintainParams, _ *ferry.ArchiveMaintainResult, renew func() error) error {
			for range 3 {
				if err := renew(); err != nil {
					return err
				}
				steps++
				b.clock.Advance(ferry.ArchiveLeaseTTL + time.Second)
				if _, err := b.store.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: ferry.ArchiveLease, Owner: "other", TTL: time.Hour}); err != nil {
					return err
				}
			}
			return nil
		}
		_, err := ferry.MaintainArchive(b.ctx, b.store, &ferry.ArchiveMaintainParams{Owner: "m", Retention: time.Hour}, maintain)
		if !errors.Is(err, ferry.ErrLeaseLost) || steps != 1 {
			t.Fatalf("after the lease passed: %d steps, %v; want 1 step and ErrLeaseLost", steps, err)
		}
		if held, err := b.store.LeaseAcquire(b.ctx, &ferry.LeaseAcquireParams{Name: ferry.ArchiveLease, Owner: "m", TTL: time.Minute}); err != nil || held {
			t.Fatalf("the stopped run's owner got the lease back: %v, %v; want the other's lease kept", held, err)
		}
	})

	run(t, setup, "KeepsKeysForKeyRetention", func(t *testing.T, b *bundle[TX]) {
		h := history(t, b)
		if _, err := b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{
			Owner: "m", Retention: 48 * time.Hour, KeyRetention: 30 * 24 * time.Hour,
		}); err != nil {
			t.Fatal(err)
		}
		res := redeliver(t, b, "stripe", "old", `{"id":"old"}`)
		if res.Outcome == ferry.ReceiveNew {
			t.Fatalf("redelivery of an event inside KeyRetention stored a new event %d (old was %d)", res.ID, h.old)
		}
	})

	// A Retention shorter than the replay window drops events (PostgreSQL)
	// but never their keys: KeyRetention defaults to the longer of the two,
	// ReplayWindow to DefaultReplayWindow. A redelivery inside the window
	// stays a duplicate whatever the store keeps, and one past it is new.
	run(t, setup, "KeepsKeysForTheReplayWindow", func(t *testing.T, b *bundle[TX]) {
		receive(t, b, "stripe", "evt")
		mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		maintain := func(p *ferry.ArchiveMaintainParams) *ferry.ArchiveMaintainResult {
			t.Helper()
			res, err := b.store.ArchiveMaintain(b.ctx, p)
			if err != nil || res.Skipped {
				t.Fatalf("ArchiveMaintain(%+v) = %+v, %v", p, res, err)
			}
			return res
		}
		wantOutcome := func(when string, want ferry.ReceiveOutcome) {
			t.Helper()
			if res := redeliver(t, b, "stripe", "evt", `{"id":"evt"}`); res.Outcome != want {
				t.Fatalf("redelivery %s: outcome %s, want %s", when, res.Outcome, want)
			}
		}
		// 60 hours on, its day is past a 24-hour retention, not past 72 hours.
		b.clock.Advance(60 * time.Hour)
		maintain(&ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour})
		wantOutcome("inside the default replay window", ferry.ReceiveDuplicate)
		b.clock.Advance(30 * time.Hour)
		wide := &ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour, ReplayWindow: 96 * time.Hour}
		maintain(wide)
		wantOutcome("inside a 96-hour replay window", ferry.ReceiveDuplicate)
		b.clock.Advance(10 * time.Hour)
		if res := maintain(wide); res.Keys != 1 {
			t.Errorf("maintenance past the replay window purged %d keys, want 1", res.Keys)
		}
		wantOutcome("past the replay window", ferry.ReceiveNew)
	})

	run(t, setup, "RefusesKeyRetentionShorterThanTheReplayWindow", func(t *testing.T, b *bundle[TX]) {
		h := history(t, b)
		for name, params := range map[string]*ferry.ArchiveMaintainParams{
			"DefaultWindow":  {Owner: "m", Retention: 48 * time.Hour, KeyRetention: 71 * time.Hour},
			"ExplicitWindow": {Owner: "m", Retention: 48 * time.Hour, ReplayWindow: 96 * time.Hour, KeyRetention: 95 * time.Hour},
		} {
			_, err := b.store.ArchiveMaintain(b.ctx, params)
			if !errors.Is(err, ferry.ErrRetentionTooShort) || !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("%s: err = %v, want ErrRetentionTooShort and ErrInvalidParams", name, err)
			}
		}
		wantState(t, b, h.old, ferry.StateDone)
	})

	run(t, setup, "Info", func(t *testing.T, b *bundle[TX]) {
		history(t, b)
		info, err := b.store.ArchiveInfo(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Now.Equal(b.clock.Now()) {
			t.Errorf("ArchiveInfo.Now = %v, want the store's clock %v", info.Now, b.clock.Now())
		}
		switch {
		case !info.Partitioned && (info.Partitions != 0 || !info.End.IsZero()):
			t.Errorf("not partitioned, but %d partitions ending %v", info.Partitions, info.End)
		case info.Partitions < 0:
			t.Errorf("ArchiveInfo.Partitions = %d", info.Partitions)
		case info.Partitions == 0 && !info.Oldest.IsZero():
			t.Errorf("no partitions but Oldest = %v", info.Oldest)
		case info.Partitions > 0 && (info.Oldest.IsZero() || info.Oldest.After(info.Now)):
			t.Errorf("%d partitions, Oldest = %v at %v", info.Partitions, info.Oldest, info.Now)
		}
	})

	run(t, setup, "InvalidParams", func(t *testing.T, b *bundle[TX]) {
		h := history(t, b)
		for name, params := range map[string]*ferry.ArchiveMaintainParams{
			"NoOwner":              {Retention: 48 * time.Hour},
			"NoRetention":          {Owner: "m"},
			"NegativeRetention":    {Owner: "m", Retention: -time.Hour},
			"NegativeKeyRetention": {Owner: "m", Retention: 48 * time.Hour, KeyRetention: -time.Hour},
			"NegativeReplayWindow": {Owner: "m", Retention: 48 * time.Hour, ReplayWindow: -time.Hour},
			"NegativeAhead":        {Owner: "m", Retention: 48 * time.Hour, Ahead: -time.Hour},
			"NegativeKeyBatch":     {Owner: "m", Retention: 48 * time.Hour, KeyBatch: -1},
		} {
			if _, err := b.store.ArchiveMaintain(b.ctx, params); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("%s: err = %v, want ErrInvalidParams", name, err)
			}
		}
		wantState(t, b, h.old, ferry.StateDone)
	})
}
