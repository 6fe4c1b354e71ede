package sqlite_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

func TestEventList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for i := range 5 {
		ids = append(ids, b.receive(t, "a", fmt.Sprintf("evt_%d", i)))
		b.clock.Advance(time.Second)
	}
	other := b.receive(t, "b", "evt%_x")
	b.claim(t, "w", 1, ttl) // ids[0] goes in_progress

	list := func(p ferry.EventListParams) *ferry.EventListResult {
		t.Helper()
		res, err := b.store.EventList(t.Context(), &p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	idsOf := func(res *ferry.EventListResult) []int64 {
		var out []int64
		for _, e := range res.Events {
			out = append(out, e.ID)
		}
		return out
	}

	t.Run("NewestFirstWithoutPayload", func(t *testing.T) {
		res := list(ferry.EventListParams{})
		if got := idsOf(res); len(got) != 6 || got[0] != other || got[5] != ids[0] || res.NextBefore != 0 {
			t.Fatalf("ids = %v, next %d", got, res.NextBefore)
		}
		e := res.Events[0]
		if e.Payload != nil || e.Headers != nil || e.EventID != "evt%_x" || len(e.PayloadSHA256) != 32 {
			t.Errorf("listed event = %+v, want metadata only", e)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		var got []int64
		p := ferry.EventListParams{Limit: 4}
		for {
			res := list(p)
			got = append(got, idsOf(res)...)
			if res.NextBefore == 0 {
				break
			}
			p.Before = res.NextBefore
		}
		if len(got) != 6 {
			t.Errorf("paged ids = %v, want all 6 once", got)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		for name, tt := range map[string]struct {
			params ferry.EventListParams
			want   int
		}{
			"Source":          {ferry.EventListParams{Source: "b"}, 1},
			"States":          {ferry.EventListParams{States: []ferry.State{ferry.StateInProgress}}, 1},
			"Since":           {ferry.EventListParams{Since: b.get(t, ids[3]).FirstDeliveredAt}, 3},
			"ContainsLiteral": {ferry.EventListParams{EventIDContains: "%_"}, 1},
			"Contains":        {ferry.EventListParams{EventIDContains: "evt_"}, 5},
			"Combined":        {ferry.EventListParams{Source: "a", States: []ferry.State{ferry.StatePending}, Before: ids[4]}, 3},
		} {
			if got := list(tt.params).Events; len(got) != tt.want {
				t.Errorf("%s: %d events, want %d", name, len(got), tt.want)
			}
		}
	})
}

func TestEventRequeue(t *testing.T) {
	t.Parallel()

	// states makes one event in each state and returns their ids by state.
	states := func(t *testing.T, b *testBundle, source string) map[ferry.State]int64 {
		t.Helper()
		out := map[ferry.State]int64{}
		// Claims take the oldest due event, and the hold moves every expired
		// lease: so the claimed ones first, in_progress after the hold.
		order := []ferry.State{ferry.StateDone, ferry.StateDead, ferry.StateUnknown, ferry.StateInProgress, ferry.StatePending}
		for _, st := range order {
			id := b.receive(t, source, string(st))
			out[st] = id
			if st == ferry.StatePending {
				continue
			}
			claims, err := b.store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{
				Owner: "w", Limit: 1, TTL: ttl, Sources: []string{source},
			})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim = %v, %v", claims, err)
			}
			lease := claims[0].Event.Lease()
			switch st {
			case ferry.StateDone:
				err = b.store.EventComplete(t.Context(), &ferry.EventCompleteParams{Lease: lease})
			case ferry.StateDead:
				_, err = b.store.EventFail(t.Context(), &ferry.EventFailParams{Lease: lease, Dead: true})
			case ferry.StateUnknown:
				b.clock.Advance(ttl)
				_, err = b.store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{
					Owner: "w", Limit: 1, TTL: ttl, Sources: []string{"none"}, HoldSources: []string{source},
				})
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := b.get(t, id).State; got != st {
				t.Fatalf("made %s, got %s", st, got)
			}
		}
		return out
	}

	t.Run("BulkDefaultsToDeadAndUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := states(t, b, "a")
		other := states(t, b, "b")
		b.clock.Advance(time.Minute)
		n, err := b.store.EventRequeue(t.Context(), &ferry.EventRequeueParams{Source: "a"})
		if err != nil || n != 2 {
			t.Fatalf("requeue = %d, %v; want 2", n, err)
		}
		for _, st := range []ferry.State{ferry.StateDead, ferry.StateUnknown} {
			e := b.get(t, ids[st])
			now := b.clock.Now().Truncate(time.Microsecond)
			if e.State != ferry.StatePending || !e.RequeuedAt.Equal(now) || !e.NextAttemptAt.Equal(now) {
				t.Errorf("%s event after requeue = %+v", st, e)
			}
		}
		if got := b.get(t, ids[ferry.StateDone]).State; got != ferry.StateDone {
			t.Errorf("done event went %s in a bulk requeue", got)
		}
		if got := b.get(t, other[ferry.StateDead]).State; got != ferry.StateDead {
			t.Errorf("other source's dead event went %s", got)
		}
	})

	t.Run("IDsNeverPendingOrInProgress", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := states(t, b, "a")
		all := []int64{}
		for _, id := range ids {
			all = append(all, id)
		}
		n, err := b.store.EventRequeue(t.Context(), &ferry.EventRequeueParams{IDs: all, States: ferry.States})
		if err != nil || n != 3 {
			t.Fatalf("requeue = %d, %v; want 3", n, err)
		}
		if e := b.get(t, ids[ferry.StateInProgress]); e.State != ferry.StateInProgress || e.LeaseOwner == "" {
			t.Errorf("in_progress event = %+v, want untouched", e)
		}
		if e := b.get(t, ids[ferry.StateDone]); e.State != ferry.StatePending || !e.CompletedAt.IsZero() {
			t.Errorf("done event = %+v, want pending without completed_at", e)
		}
	})

	t.Run("InvalidState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.store.EventRequeue(t.Context(), &ferry.EventRequeueParams{States: []ferry.State{"bogus"}})
		if !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("err = %v, want ErrInvalidParams", err)
		}
	})
}

func TestEventPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	done := b.receive(t, "s", "done")
	lease := b.claim(t, "w", 1, ttl)[0].Event.Lease()
	if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "done", Payload: []byte("other")}); err != nil {
		t.Fatal(err) // a conflict row, which must go with the event
	}
	pending := b.receive(t, "s", "pending")
	elsewhere := b.receive(t, "t", "done")
	lease = b.claim(t, "w", 1, ttl)[0].Event.Lease()
	if lease.ID == elsewhere {
		if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}

	day := 24 * time.Hour
	if _, err := b.store.EventPurge(ctx, &ferry.EventPurgeParams{Source: "s", Retention: day, ReplayWindow: 3 * day}); !errors.Is(err, ferry.ErrRetentionTooShort) {
		t.Fatalf("short retention = %v, want ErrRetentionTooShort", err)
	}
	if _, err := b.store.EventPurge(ctx, &ferry.EventPurgeParams{Retention: day}); !errors.Is(err, ferry.ErrInvalidParams) {
		t.Fatalf("no source = %v, want ErrInvalidParams", err)
	}
	purge := func() int {
		n, err := b.store.EventPurge(ctx, &ferry.EventPurgeParams{Source: "s", Retention: 3 * day, ReplayWindow: 3 * day})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	b.clock.Advance(3*day - time.Second)
	if n := purge(); n != 0 {
		t.Fatalf("purged %d before retention, want 0", n)
	}
	b.clock.Advance(time.Second)
	if n := purge(); n != 1 {
		t.Fatalf("purged %d, want 1", n)
	}
	if _, err := b.store.EventGet(ctx, &ferry.EventGetParams{ID: done}); !errors.Is(err, ferry.ErrNotFound) {
		t.Errorf("purged event still there: %v", err)
	}
	if n := countRows(t, b, "ferry_attempt WHERE event_id = "+fmt.Sprint(done)) + countRows(t, b, "ferry_conflict"); n != 0 {
		t.Errorf("%d ledger or conflict rows left behind", n)
	}
	b.get(t, pending)
	b.get(t, elsewhere)
}
