package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testList checks EventList: filters and pages.
func testList[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "FiltersAndPages", func(t *testing.T, b *bundle[TX]) {
		var ids []int64
		for i := range 7 {
			ids = append(ids, receive(t, b, "stripe", fmt.Sprintf("evt_%d", i)))
		}
		receive(t, b, "github", "evt_x")
		receive(t, b, "stripe", "evt_100%")
		start := b.clock.Now()
		b.clock.Advance(time.Minute)
		late := receive(t, b, "stripe", "late")
		lease := claimOne(t, b, "w1").Event.Lease() // claims ids[0], the oldest due
		mustComplete(t, b, lease)

		var seen []int64
		before := int64(0)
		for pages := 0; ; pages++ {
			page, err := b.store.EventList(b.ctx, &ferry.EventListParams{Source: "stripe", Limit: 3, Before: before})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				if ev.Source != "stripe" || ev.Payload != nil || ev.Headers != nil {
					t.Fatalf("listed %s/%s with payload %q headers %v", ev.Source, ev.EventID, ev.Payload, ev.Headers)
				}
				seen = append(seen, ev.ID)
			}
			if page.NextBefore == 0 {
				break
			}
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			before = page.NextBefore
		}
		if len(seen) != 9 || !slices.IsSortedFunc(seen, func(a, b int64) int { return int(b - a) }) {
			t.Fatalf("paged ids %v: want 9, newest first", seen)
		}

		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateDone}})
		if err != nil || len(page.Events) != 1 || page.Events[0].ID != ids[0] || page.Events[0].State != ferry.StateDone {
			t.Fatalf("done filter: %v %v", page, err)
		}
		page, err = b.store.EventList(b.ctx, &ferry.EventListParams{EventIDContains: "0%"})
		if err != nil || len(page.Events) != 1 || page.Events[0].EventID != "evt_100%" {
			t.Fatalf("search for a literal %%: %+v %v", page, err)
		}
		page, err = b.store.EventList(b.ctx, &ferry.EventListParams{Since: start.Add(time.Second)})
		if err != nil || len(page.Events) != 1 || page.Events[0].ID != late {
			t.Fatalf("since filter: %+v %v", page, err)
		}
	})

	run(t, setup, "PageBoundsAndEdgeFilters", func(t *testing.T, b *bundle[TX]) {
		start := b.clock.Now()
		var ids []int64
		for i := range 5 {
			ids = append(ids, receive(t, b, "s", fmt.Sprintf("evt_%d", i)))
			b.clock.Advance(time.Second)
		}
		receive(t, b, "other", "evt%_x")
		claimOne(t, b, "w") // ids[0] goes in_progress
		list := func(p ferry.EventListParams) *ferry.EventListResult {
			t.Helper()
			res, err := b.store.EventList(b.ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		idsOf := func(res *ferry.EventListResult) (got []int64) {
			for _, ev := range res.Events {
				got = append(got, ev.ID)
			}
			return got
		}

		// A full page points past its last event; a short one ends the list.
		page1 := list(ferry.EventListParams{Source: "s", Limit: 3})
		if got, want := idsOf(page1), []int64{ids[4], ids[3], ids[2]}; !slices.Equal(got, want) || page1.NextBefore != ids[2] {
			t.Fatalf("page 1 = %v next %d, want %v next %d", got, page1.NextBefore, want, ids[2])
		}
		page2 := list(ferry.EventListParams{Source: "s", Limit: 3, Before: page1.NextBefore})
		if got, want := idsOf(page2), []int64{ids[1], ids[0]}; !slices.Equal(got, want) || page2.NextBefore != 0 {
			t.Fatalf("page 2 = %v next %d, want %v next 0", got, page2.NextBefore, want)
		}
		if res := list(ferry.EventListParams{States: []ferry.State{ferry.StateInProgress}}); len(res.Events) != 1 || res.Events[0].ID != ids[0] {
			t.Fatalf("in_progress = %v, want [%d]", idsOf(res), ids[0])
		}
		if res := list(ferry.EventListParams{States: []ferry.State{ferry.StatePending, ferry.StateInProgress}}); len(res.Events) != 6 {
			t.Fatalf("pending or in_progress = %v, want all 6", idsOf(res))
		}
		// LIKE's wildcards are searched for literally.
		if res := list(ferry.EventListParams{EventIDContains: "%_"}); len(res.Events) != 1 || res.Events[0].Source != "other" {
			t.Fatalf("literal substring = %v, want only other's event", idsOf(res))
		}
		// Since takes the events received at that instant too.
		if res := list(ferry.EventListParams{Since: start.Add(3 * time.Second)}); len(res.Events) != 3 {
			t.Fatalf("since = %v, want 3 events", idsOf(res))
		}
	})

	// The page size defaults to ferry.EventListLimitDefault.
	run(t, setup, "DefaultLimit", func(t *testing.T, b *bundle[TX]) {
		receipts := make([]*ferry.EventReceiveParams, ferry.EventListLimitDefault+1)
		for i := range receipts {
			receipts[i] = &ferry.EventReceiveParams{Source: "s", EventID: fmt.Sprint("evt_", i)}
		}
		if _, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: receipts}); err != nil {
			t.Fatal(err)
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != ferry.EventListLimitDefault || page.NextBefore == 0 {
			t.Fatalf("page of %d, next %d; want %d and a next page", len(page.Events), page.NextBefore, ferry.EventListLimitDefault)
		}
	})

	t.Run("TypeUntilAndNewer", func(t *testing.T) { testListTypeUntilAndNewer(t, setup) })
	t.Run("LapsedAttempts", func(t *testing.T) { testListLapsedAttempts(t, setup) })

	// A negative cursor starts at the newest, as zero does.
	run(t, setup, "NegativeBeforeStartsAtTheNewest", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "s", "evt_1")
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{Before: -1})
		if err != nil || len(page.Events) != 1 || page.Events[0].ID != id {
			t.Fatalf("list before -1 = %+v, %v; want the one event", page, err)
		}
	})
}

// testListTypeUntilAndNewer checks EventList's Type and Until filters and
// paging to newer events with After, back to where Before paging began.
func testListTypeUntilAndNewer[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Parallel()
	b := setup(t)
	start := b.clock.Now()
	var ids []int64
	for i := range 7 {
		typ := "invoice.paid"
		if i%2 == 1 {
			typ = "charge.failed"
		}
		res := receiveWith(t, b, &ferry.EventReceiveParams{Source: "s", EventID: fmt.Sprint("evt_", i), Type: typ})
		ids = append(ids, res.ID)
		b.clock.Advance(time.Second)
	}
	list := func(p ferry.EventListParams) (*ferry.EventListResult, []int64) {
		t.Helper()
		return listIDs(t, b, p)
	}

	if _, got := list(ferry.EventListParams{Type: "charge.failed"}); !slices.Equal(got, []int64{ids[5], ids[3], ids[1]}) {
		t.Errorf("type filter = %v, want %v", got, []int64{ids[5], ids[3], ids[1]})
	}
	// Until is exclusive; with Since it is a window [Since, Until).
	if _, got := list(ferry.EventListParams{Until: start.Add(2 * time.Second)}); !slices.Equal(got, []int64{ids[1], ids[0]}) {
		t.Errorf("until = %v, want the first two", got)
	}
	if _, got := list(ferry.EventListParams{Since: start.Add(2 * time.Second), Until: start.Add(4 * time.Second), Type: "invoice.paid"}); !slices.Equal(got, []int64{ids[2]}) {
		t.Errorf("since, until and type = %v, want [%d]", got, ids[2])
	}

	// Older pages with Before, then back with After: the same pages.
	p1, got1 := list(ferry.EventListParams{Limit: 3})
	p2, got2 := list(ferry.EventListParams{Limit: 3, Before: p1.NextBefore})
	p3, got3 := list(ferry.EventListParams{Limit: 3, Before: p2.NextBefore})
	if !slices.Equal(got3, []int64{ids[0]}) || p3.NextBefore != 0 || p1.NextAfter != 0 {
		t.Fatalf("pages %v %v %v", got1, got2, got3)
	}
	back2, gotBack2 := list(ferry.EventListParams{Limit: 3, After: ids[0]})
	if !slices.Equal(gotBack2, got2) || back2.NextAfter != got2[0] || back2.NextBefore != 0 {
		t.Fatalf("newer than %d = %v next after %d; want %v next after %d", ids[0], gotBack2, back2.NextAfter, got2, got2[0])
	}
	back1, gotBack1 := list(ferry.EventListParams{Limit: 3, After: back2.NextAfter})
	if !slices.Equal(gotBack1, got1) || back1.NextAfter != 0 {
		t.Fatalf("newer than %d = %v next after %d; want %v and no newer page", back2.NextAfter, gotBack1, back1.NextAfter, got1)
	}
	// Filters hold in both directions.
	if _, got := list(ferry.EventListParams{Type: "invoice.paid", After: ids[0]}); !slices.Equal(got, []int64{ids[6], ids[4], ids[2]}) {
		t.Errorf("newer invoice.paid = %v", got)
	}
}

// testListLapsedAttempts checks EventList's LapsedAttempts: it keeps the
// events with an attempt closed as lease_expired, each once, wherever they
// are (a done one too: PostgreSQL's archive, with its own ledger), with the
// other filters and paging either way.
func testListLapsedAttempts[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Parallel()
	b := setup(t)
	// lapse claims source's due event and lets the lease lapse; the next
	// claim takes it back, closing the first attempt as lease_expired.
	lapse := func(source string) ferry.Lease {
		t.Helper()
		first := claim(t, b, "dies", 1, source)
		b.clock.Advance(ttl)
		again := claim(t, b, "w", 1, source)
		if len(first) != 1 || len(again) != 1 || again[0].Event.ID != first[0].Event.ID || !again[0].PreviousUnfinished {
			t.Fatalf("%s: claimed %d then %d events, want one taken back", source, len(first), len(again))
		}
		return again[0].Event.Lease()
	}
	done := receive(t, b, "stripe", "evt_done")
	mustComplete(t, b, lapse("stripe"))
	receive(t, b, "stripe", "evt_clean")
	mustComplete(t, b, claim(t, b, "w", 1, "stripe")[0].Event.Lease())
	twice := receive(t, b, "stripe", "evt_twice") // two lapsed attempts, listed once
	lapse("stripe")
	b.clock.Advance(ttl)
	third := claim(t, b, "w", 1, "stripe")
	if len(third) != 1 || third[0].Event.ID != twice {
		t.Fatalf("claimed %d events, want %d taken back again", len(third), twice)
	}
	if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: third[0].Event.Lease(), Error: "boom", Dead: true}); err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, b, twice, ferry.OutcomeLeaseExpired, ferry.OutcomeLeaseExpired, ferry.OutcomeDead)
	other := receive(t, b, "github", "gh_1")
	lapse("github") // in progress
	live := receive(t, b, "stripe", "evt_live")
	lapse("stripe") // in progress
	receive(t, b, "stripe", "evt_pending")

	list := func(p ferry.EventListParams) (*ferry.EventListResult, []int64) {
		t.Helper()
		p.LapsedAttempts = true
		return listIDs(t, b, p)
	}
	if _, got := list(ferry.EventListParams{}); !slices.Equal(got, []int64{live, other, twice, done}) {
		t.Errorf("lapsed = %v, want %v", got, []int64{live, other, twice, done})
	}
	if _, got := list(ferry.EventListParams{States: []ferry.State{ferry.StateDone}}); !slices.Equal(got, []int64{done}) {
		t.Errorf("lapsed and done = %v, want [%d]", got, done)
	}
	// A source, page after page, older then newer.
	p1, got1 := list(ferry.EventListParams{Source: "stripe", Limit: 2})
	if !slices.Equal(got1, []int64{live, twice}) || p1.NextBefore != twice {
		t.Fatalf("stripe's lapsed, page 1 = %v next %d; want %v next %d", got1, p1.NextBefore, []int64{live, twice}, twice)
	}
	p2, got2 := list(ferry.EventListParams{Source: "stripe", Limit: 2, Before: p1.NextBefore})
	if !slices.Equal(got2, []int64{done}) || p2.NextBefore != 0 {
		t.Fatalf("stripe's lapsed, page 2 = %v next %d; want [%d] and no older page", got2, p2.NextBefore, done)
	}
	if up, got := list(ferry.EventListParams{Source: "stripe", Limit: 1, After: done}); !slices.Equal(got, []int64{twice}) || up.NextAfter != twice {
		t.Errorf("stripe's lapsed newer than %d = %v next after %d; want [%d] next after %d", done, got, up.NextAfter, twice, twice)
	}
	all, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
	if err != nil || len(all.Events) != 6 {
		t.Fatalf("without LapsedAttempts: %d events, %v; want all 6", len(all.Events), err)
	}
}

// listIDs lists p and returns the page with its events' ids.
func listIDs[TX any](t *testing.T, b *bundle[TX], p ferry.EventListParams) (*ferry.EventListResult, []int64) {
	t.Helper()
	res, err := b.store.EventList(b.ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, ev := range res.Events {
		got = append(got, ev.ID)
	}
	return res, got
}
