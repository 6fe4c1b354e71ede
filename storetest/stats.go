package storetest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testStats checks EventStats.
func testStats[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	statsOf := func(t *testing.T, b *bundle[TX], params *ferry.EventStatsParams) *ferry.EventStats {
		t.Helper()
		stats, err := b.store.EventStats(b.ctx, params)
		if err != nil {
			t.Fatalf("EventStats: %v", err)
		}
		return stats
	}
	bySource := func(stats *ferry.EventStats) map[string]*ferry.SourceStats {
		m := map[string]*ferry.SourceStats{}
		for _, s := range stats.Sources {
			m[s.Source] = s
		}
		return m
	}

	run(t, setup, "Empty", func(t *testing.T, b *bundle[TX]) {
		stats := statsOf(t, b, &ferry.EventStatsParams{DefaultAtRiskAfter: time.Hour, AtRiskLimit: 10})
		if len(stats.Sources) != 0 || len(stats.AtRisk) != 0 {
			t.Fatalf("empty store: got %d sources, %d at risk; want none", len(stats.Sources), len(stats.AtRisk))
		}
		if !stats.Now.Equal(b.clock.Now()) {
			t.Errorf("Now = %v, want the store clock %v", stats.Now, b.clock.Now())
		}
	})

	run(t, setup, "CountsAndAges", func(t *testing.T, b *bundle[TX]) {
		start := b.clock.Now()
		// a: one done, one dead, one pending; b: one in_progress whose lease
		// lapses, with a second claim's running attempt.
		done := receive(t, b, "a", "done")
		dead := receive(t, b, "a", "dead")
		c := claimOne(t, b, "w1")
		mustComplete(t, b, c.Event.Lease())
		c = claimOne(t, b, "w1")
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Error: "boom", Dead: true}); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, done, ferry.StateDone)
		wantState(t, b, dead, ferry.StateDead)

		b.clock.Advance(time.Minute)
		pendingAt := b.clock.Now()
		receive(t, b, "a", "pending")
		b.clock.Advance(time.Minute)
		running := receive(t, b, "b", "running")
		claimedAt := b.clock.Now()
		claim(t, b, "w2", 1, "b")
		b.clock.Advance(ttl + time.Second) // the lease of "running" lapses

		stats := statsOf(t, b, &ferry.EventStatsParams{})
		if !stats.Now.Equal(start.Add(2*time.Minute + ttl + time.Second)) {
			t.Errorf("Now = %v, want the store clock", stats.Now)
		}
		got := bySource(stats)
		if len(stats.Sources) != 2 || stats.Sources[0].Source != "a" || stats.Sources[1].Source != "b" {
			t.Fatalf("sources = %v, want a and b in order", got)
		}
		a, bb := got["a"], got["b"]
		wantCounts := func(s *ferry.SourceStats, want map[ferry.State]int) {
			t.Helper()
			for _, st := range ferry.States {
				if s.States[st] != want[st] {
					t.Errorf("%s: %s = %d, want %d", s.Source, st, s.States[st], want[st])
				}
			}
		}
		wantCounts(a, map[ferry.State]int{ferry.StateDone: 1, ferry.StateDead: 1, ferry.StatePending: 1})
		wantCounts(bb, map[ferry.State]int{ferry.StateInProgress: 1})
		if a.Total() != 3 {
			t.Errorf("a: Total = %d, want 3", a.Total())
		}
		if !a.OldestPending.Equal(pendingAt) || !a.OldestInProgress.IsZero() {
			t.Errorf("a: oldest pending %v, in progress %v; want %v and zero", a.OldestPending, a.OldestInProgress, pendingAt)
		}
		if !bb.OldestInProgress.Equal(claimedAt) || !bb.OldestPending.IsZero() {
			t.Errorf("b: oldest in progress %v, pending %v; want %v and zero", bb.OldestInProgress, bb.OldestPending, claimedAt)
		}
		if a.LeaseExpired != 0 || bb.LeaseExpired != 1 {
			t.Errorf("lease expired: a %d, b %d; want 0 and 1", a.LeaseExpired, bb.LeaseExpired)
		}
		if a.UnfinishedAttempts != 0 || bb.UnfinishedAttempts != 1 {
			t.Errorf("unfinished attempts: a %d, b %d; want 0 and 1 (a running attempt past its lease)", a.UnfinishedAttempts, bb.UnfinishedAttempts)
		}

		// The next claim closes the lapsed attempt as lease_expired and
		// runs a fresh one: still one unfinished, and no lease expired.
		reclaimed := claim(t, b, "w3", 1, "b")
		wantOutcomes(t, b, running, ferry.OutcomeLeaseExpired, ferry.OutcomeRunning)
		bb = bySource(statsOf(t, b, &ferry.EventStatsParams{}))["b"]
		if bb.UnfinishedAttempts != 1 || bb.LeaseExpired != 0 {
			t.Errorf("after reclaim: unfinished %d, lease expired %d; want 1 and 0", bb.UnfinishedAttempts, bb.LeaseExpired)
		}

		// Done, the event keeps its ledger and the count its attempt that
		// never reported, wherever the store keeps done events.
		mustComplete(t, b, reclaimed[0].Event.Lease())
		wantOutcomes(t, b, running, ferry.OutcomeLeaseExpired, ferry.OutcomeDone)
		bb = bySource(statsOf(t, b, &ferry.EventStatsParams{}))["b"]
		if bb.UnfinishedAttempts != 1 || bb.States[ferry.StateDone] != 1 {
			t.Errorf("after completion: unfinished %d, done %d; want 1 and 1", bb.UnfinishedAttempts, bb.States[ferry.StateDone])
		}
	})

	// OldestDue is the oldest next attempt time at or before now among
	// pending events: an event backing off is not overdue, however old.
	run(t, setup, "OldestDue", func(t *testing.T, b *bundle[TX]) {
		first := b.clock.Now()
		poison := receive(t, b, "a", "poison")
		c := claimOne(t, b, "w")
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Error: "500", RetryDelay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		wantDue := func(when string, want time.Time) {
			t.Helper()
			a := bySource(statsOf(t, b, &ferry.EventStatsParams{}))["a"]
			if !a.OldestDue.Equal(want) || !a.OldestPending.Equal(first) {
				t.Errorf("%s: oldest due %v, oldest pending %v; want %v and %v", when, a.OldestDue, a.OldestPending, want, first)
			}
		}
		wantDue("only an event in backoff", time.Time{})

		b.clock.Advance(time.Minute)
		freshAt := b.clock.Now()
		fresh := receive(t, b, "a", "fresh")
		b.clock.Advance(time.Minute)
		wantDue("a new event waits", freshAt)

		mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		wantState(t, b, fresh, ferry.StateDone)
		b.clock.Advance(time.Hour)
		wantDue("the backoff ended", first.Add(time.Hour))

		claimOne(t, b, "w")
		wantState(t, b, poison, ferry.StateInProgress)
		if a := bySource(statsOf(t, b, &ferry.EventStatsParams{}))["a"]; !a.OldestDue.IsZero() {
			t.Errorf("claimed: oldest due %v, want zero (in progress is not waiting)", a.OldestDue)
		}
	})

	// The done count is kept as events move, not counted from history, so
	// each move out of done must take its event off: requeue and purge.
	run(t, setup, "DoneCountFollowsRequeueAndPurge", func(t *testing.T, b *bundle[TX]) {
		ids := []int64{receive(t, b, "a", "e1"), receive(t, b, "a", "e2"), receive(t, b, "a", "e3")}
		for range ids {
			mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		}
		wantDone := func(when string, done, pending int) {
			t.Helper()
			a := bySource(statsOf(t, b, &ferry.EventStatsParams{}))["a"]
			if a == nil || a.States[ferry.StateDone] != done || a.States[ferry.StatePending] != pending {
				t.Fatalf("%s: stats %+v, want done %d and pending %d", when, a, done, pending)
			}
		}
		wantDone("all completed", 3, 0)
		if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: ids[:1], States: []ferry.State{ferry.StateDone}, Actor: "op"}); err != nil {
			t.Fatal(err)
		}
		wantDone("one requeued", 2, 1)
		b.clock.Advance(2 * time.Hour)
		n, err := b.store.EventPurge(b.ctx, &ferry.EventPurgeParams{Source: "a", Retention: time.Hour, ReplayWindow: time.Hour})
		if err != nil || n != 2 {
			t.Fatalf("EventPurge = %d, %v; want 2 purged", n, err)
		}
		wantDone("the rest purged", 0, 1)

		// A source with no event left has no entry, however its done
		// count came back to zero.
		mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		b.clock.Advance(2 * time.Hour)
		if n, err := b.store.EventPurge(b.ctx, &ferry.EventPurgeParams{Source: "a", Retention: time.Hour, ReplayWindow: time.Hour}); err != nil || n != 1 {
			t.Fatalf("EventPurge = %d, %v; want 1 purged", n, err)
		}
		if stats := statsOf(t, b, &ferry.EventStatsParams{}); len(stats.Sources) != 0 {
			t.Errorf("every event purged: sources %+v, want none", stats.Sources[0])
		}
	})

	run(t, setup, "AtRisk", func(t *testing.T, b *bundle[TX]) {
		first := b.clock.Now()
		oldA := receive(t, b, "a", "old-pending")
		deadA := receive(t, b, "a", "old-dead")
		c := claim(t, b, "w", 2, "a")
		for _, cl := range c {
			if cl.Event.ID == deadA {
				if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: cl.Event.Lease(), Error: "x", Dead: true}); err != nil {
					t.Fatal(err)
				}
			} else if err := b.store.EventRelease(b.ctx, &ferry.EventReleaseParams{Lease: cl.Event.Lease()}); err != nil {
				t.Fatal(err)
			}
		}
		oldB := receive(t, b, "b", "old")
		oldC := receive(t, b, "c", "old") // c uses the default
		b.clock.Advance(2 * time.Hour)
		receive(t, b, "a", "young")

		params := &ferry.EventStatsParams{
			AtRiskAfter:        map[string]time.Duration{"a": time.Hour, "b": 3 * time.Hour},
			DefaultAtRiskAfter: 90 * time.Minute,
			AtRiskLimit:        10,
		}
		stats := statsOf(t, b, params)
		got := bySource(stats)
		// a: old-pending is 2h old, past 1h; old-dead is dead, not counted;
		// young is new. b: 2h is inside 3h. c: past the 90m default.
		if got["a"].AtRisk != 1 || got["b"].AtRisk != 0 || got["c"].AtRisk != 1 {
			t.Errorf("at risk: a %d, b %d, c %d; want 1, 0, 1", got["a"].AtRisk, got["b"].AtRisk, got["c"].AtRisk)
		}
		if !got["a"].OldestAtRisk.Equal(first) || !got["b"].OldestAtRisk.IsZero() {
			t.Errorf("oldest at risk: a %v, b %v; want %v and zero", got["a"].OldestAtRisk, got["b"].OldestAtRisk, first)
		}
		var ids []int64
		for _, e := range stats.AtRisk {
			ids = append(ids, e.ID)
			if e.Payload != nil {
				t.Errorf("at-risk event %d carries its payload; lists leave it out", e.ID)
			}
		}
		if len(ids) != 2 || ids[0] != oldA || ids[1] != oldC {
			t.Errorf("at-risk list = %v, want [%d %d] (oldest first)", ids, oldA, oldC)
		}
		// The limit keeps the oldest of the two at risk, and the counts.
		capped := *params
		capped.AtRiskLimit = 1
		stats = statsOf(t, b, &capped)
		if len(stats.AtRisk) != 1 || stats.AtRisk[0].ID != oldA || stats.AtRiskCount() != 2 {
			t.Errorf("AtRiskLimit 1: listed %v of %d at risk, want only %d of 2", stats.AtRisk, stats.AtRiskCount(), oldA)
		}
		// The root's predicate, which the dashboard and the CLI mark events
		// with, says what the store's query says, event by event; b's old
		// event is exactly 2h old, at risk at 2h.
		all, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
		if err != nil {
			t.Fatal(err)
		}
		edge := &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"a": time.Hour, "b": 2 * time.Hour}, AtRiskLimit: 10}
		for _, p := range []*ferry.EventStatsParams{params, edge} {
			listed := statsOf(t, b, p)
			for _, e := range all.Events {
				want := slices.ContainsFunc(listed.AtRisk, func(r *ferry.Event) bool { return r.ID == e.ID })
				if got := p.AtRisk(e, listed.Now); got != want {
					t.Errorf("EventStatsParams%v.AtRisk(%s/%s, %s) = %v, but the store lists it: %v", *p, e.Source, e.EventID, e.State, got, want)
				}
			}
		}
		if stats := statsOf(t, b, edge); !slices.ContainsFunc(stats.AtRisk, func(r *ferry.Event) bool { return r.ID == oldB }) || bySource(stats)["b"].AtRisk != 1 {
			t.Errorf("an event exactly its source's at-risk age old is not listed and counted at risk (b counts %d)", bySource(stats)["b"].AtRisk)
		}

		// The limit caps the list, not the counts; no default means
		// unlisted sources are never at risk; zero for a source means never.
		params = &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"a": time.Hour, "b": 0}, AtRiskLimit: 1}
		stats = statsOf(t, b, params)
		got = bySource(stats)
		if got["a"].AtRisk != 1 || got["b"].AtRisk != 0 || got["c"].AtRisk != 0 || len(stats.AtRisk) != 1 {
			t.Errorf("narrowed: a %d, b %d, c %d, listed %d; want 1, 0, 0, 1", got["a"].AtRisk, got["b"].AtRisk, got["c"].AtRisk, len(stats.AtRisk))
		}

		// Finishing the event takes it off the list.
		cl := claim(t, b, "w", 1, "a")
		if len(cl) != 1 || cl[0].Event.ID != oldA {
			t.Fatalf("claim took %v, want the old pending event", cl)
		}
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: cl[0].Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		if n := bySource(statsOf(t, b, &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"a": time.Hour}}))["a"].AtRisk; n != 0 {
			t.Errorf("after completion: a at risk = %d, want 0", n)
		}
	})

	// An at-risk event is the event EventList shows, field for field: the
	// same Event without payload or headers, whichever list it comes from.
	run(t, setup, "AtRiskListedAsEventListShowsIt", func(t *testing.T, b *bundle[TX]) {
		id := receiveWith(t, b, &ferry.EventReceiveParams{
			Source: "a", EventID: "old", Type: "t", Payload: []byte("x"), Origin: ferry.OriginCatchup,
		}).ID
		b.clock.Advance(2 * time.Hour)
		stats := statsOf(t, b, &ferry.EventStatsParams{DefaultAtRiskAfter: time.Hour, AtRiskLimit: 10})
		if len(stats.AtRisk) != 1 || stats.AtRisk[0].ID != id {
			t.Fatalf("at-risk list = %v, want event %d", stats.AtRisk, id)
		}
		listed, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
		if err != nil || len(listed.Events) != 1 {
			t.Fatalf("EventList = %v, %v", listed, err)
		}
		got, want := *stats.AtRisk[0], *listed.Events[0]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("at-risk event = %+v\nEventList shows %+v", got, want)
		}
		if got.Origin != ferry.OriginCatchup {
			t.Errorf("at-risk event Origin = %q, want %q", got.Origin, ferry.OriginCatchup)
		}
	})

	// "Sources holds one entry per source ..., sorted by name": by the
	// name's bytes, as Go sorts strings, not by the database's collation,
	// so that every store (and every database locale) lists them alike.
	// PostgreSQL differs only under a language-aware collation, which the
	// C.UTF-8 test database lacks: postgres's own
	// TestStatsSourcesInByteOrderUnderICU gives it one.
	run(t, setup, "SourcesSortedByName", func(t *testing.T, b *bundle[TX]) {
		names := []string{"a", "B", "a-c", "ab", "Z"}
		for _, n := range names {
			receive(t, b, n, "e")
		}
		var got []string
		for _, s := range statsOf(t, b, &ferry.EventStatsParams{}).Sources {
			got = append(got, s.Source)
		}
		want := slices.Clone(names)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("sources = %q, want %q", got, want)
		}
	})
}
