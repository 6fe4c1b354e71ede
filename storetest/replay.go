package storetest

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

const replayWindow = 72 * time.Hour

// replayBody is one captured GitHub-like body: what an attacker re-sends
// under new ids and types.
var replayBody = []byte(`{"action":"opened","number":7}`)

func receiveBody[TX any](t *testing.T, b *bundle[TX], source, eventID, typ string, body []byte, window time.Duration) *ferry.EventReceiveResult {
	t.Helper()
	return receiveWith(t, b, &ferry.EventReceiveParams{
		Source: source, EventID: eventID, Type: typ, Payload: body,
		Headers: http.Header{"X-Github-Delivery": {eventID}}, ReplayWindow: window,
	})
}

// replays lists every replay kept on event id, past NoticeKeep too: the
// tests of the cap count rows, not a page.
func replays[TX any](t *testing.T, b *bundle[TX], id int64) []*ferry.Replay {
	t.Helper()
	list, err := b.store.ReplayList(b.ctx, &ferry.ReplayListParams{ID: id, Limit: 1000})
	if err != nil {
		t.Fatalf("ReplayList(%d): %v", id, err)
	}
	return list
}

func countEvents[TX any](t *testing.T, b *bundle[TX]) int {
	t.Helper()
	page, err := b.store.EventList(b.ctx, &ferry.EventListParams{Limit: ferry.EventListLimitMax})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Events)
}

// testReplay checks replay detection (EventReceiveParams.ReplayWindow): a
// stored body under a new id is kept on the first event, never stored as
// an event of its own.
func testReplay[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "StoredBodyUnderANewIDIsKeptOnTheFirst", func(t *testing.T, b *bundle[TX]) {
		first := receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		if first.Outcome != ferry.ReceiveNew {
			t.Fatalf("first delivery outcome %s, want new", first.Outcome)
		}
		b.clock.Advance(time.Hour)
		for i := range 5 {
			res := receiveBody(t, b, "github", fmt.Sprint("forged-", i), "delete", replayBody, replayWindow)
			if res.Outcome != ferry.ReceiveReplay || res.ID != first.ID {
				t.Fatalf("replay %d: outcome %s id %d, want replay of %d", i, res.Outcome, res.ID, first.ID)
			}
		}
		ev := get(t, b, first.ID)
		if ev.Replays != 5 || ev.Deliveries != 1 || ev.Type != "push" || ev.EventID != "d-1" {
			t.Errorf("first event: replays %d deliveries %d type %s id %s; want 5, 1, push, d-1", ev.Replays, ev.Deliveries, ev.Type, ev.EventID)
		}
		if n := countEvents(t, b); n != 1 {
			t.Errorf("%d events stored, want 1", n)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "github", EventID: "forged-0"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("the replay's claimed id is stored: %v", err)
		}
		list := replays(t, b, first.ID)
		if len(list) != 5 {
			t.Fatalf("%d replays kept, want 5", len(list))
		}
		r := list[0]
		if r.EventID != first.ID || r.ClaimedEventID != "forged-0" || r.ClaimedType != "delete" ||
			!r.ReceivedAt.Equal(b.clock.Now()) || r.Headers.Get("X-Github-Delivery") != "forged-0" {
			t.Errorf("replay = %+v, want forged-0/delete at %v with its headers", r, b.clock.Now())
		}
		if list[4].ClaimedEventID != "forged-4" {
			t.Errorf("replays not oldest first: last is %s", list[4].ClaimedEventID)
		}
		// Only the first event is ever worked.
		if claims := claim(t, b, "w", 10); len(claims) != 1 || claims[0].Event.ID != first.ID {
			t.Errorf("claimed %d events, want only the first", len(claims))
		}
	})

	run(t, setup, "SameIDIsADuplicateNotAReplay", func(t *testing.T, b *bundle[TX]) {
		first := receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		res := receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		if res.Outcome != ferry.ReceiveDuplicate || res.ID != first.ID {
			t.Fatalf("outcome %s, want duplicate", res.Outcome)
		}
		res = receiveBody(t, b, "github", "d-1", "push", []byte(`{"other":1}`), replayWindow)
		if res.Outcome != ferry.ReceiveConflict {
			t.Fatalf("outcome %s, want conflict", res.Outcome)
		}
		if ev := get(t, b, first.ID); ev.Replays != 0 || ev.Deliveries != 3 {
			t.Errorf("replays %d deliveries %d, want 0 and 3", ev.Replays, ev.Deliveries)
		}
	})

	run(t, setup, "OffOutsideTheWindowOrAnotherSourceIsNew", func(t *testing.T, b *bundle[TX]) {
		receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		if res := receiveBody(t, b, "github", "d-2", "push", replayBody, 0); res.Outcome != ferry.ReceiveNew {
			t.Errorf("detection off: outcome %s, want new", res.Outcome)
		}
		if res := receiveBody(t, b, "shopify", "d-3", "push", replayBody, replayWindow); res.Outcome != ferry.ReceiveNew {
			t.Errorf("another source: outcome %s, want new", res.Outcome)
		}
		if res := receiveBody(t, b, "github", "d-4", "push", []byte(`{"other":1}`), replayWindow); res.Outcome != ferry.ReceiveNew {
			t.Errorf("another body: outcome %s, want new", res.Outcome)
		}
		b.clock.Advance(replayWindow + time.Second)
		if res := receiveBody(t, b, "github", "d-5", "push", []byte(`{"other":1}`), replayWindow); res.Outcome != ferry.ReceiveNew {
			t.Errorf("past the window: outcome %s, want new", res.Outcome)
		}
		// Within d-5's window now: d-5 is the original.
		b.clock.Advance(time.Second)
		res := receiveBody(t, b, "github", "d-6", "push", []byte(`{"other":1}`), replayWindow)
		if d5, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "github", EventID: "d-5"}); err != nil || res.Outcome != ferry.ReceiveReplay || res.ID != d5.ID {
			t.Errorf("outcome %s id %d, want a replay of d-5 (%v)", res.Outcome, res.ID, err)
		}
	})

	run(t, setup, "ConcurrentNewIDsStoreOne", func(t *testing.T, b *bundle[TX]) {
		const n = 16
		id, news := receiveAtOnce(t, b, n, ferry.ReceiveReplay, func(i int) *ferry.EventReceiveParams {
			return &ferry.EventReceiveParams{
				Source: "github", EventID: fmt.Sprint("d-", i), Payload: replayBody, ReplayWindow: replayWindow,
			}
		})
		if news != 1 || countEvents(t, b) != 1 {
			t.Fatalf("%d new, %d events stored; want 1 and 1", news, countEvents(t, b))
		}
		if ev, kept := get(t, b, id), len(replays(t, b, id)); ev.Replays != n-1 || kept != min(n-1, ferry.NoticeKeep) {
			t.Errorf("replays %d counted, %d kept; want %d and %d", ev.Replays, kept, n-1, min(n-1, ferry.NoticeKeep))
		}
	})

	// One captured body re-sent under fresh ids keeps NoticeKeep rows on
	// its event, the first to arrive; every further one is answered and
	// counted as a replay and keeps nothing, so it cannot fill the disk.
	run(t, setup, "KeptUpToNoticeKeepThenCounted", func(t *testing.T, b *bundle[TX]) {
		first := receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		const n = ferry.NoticeKeep + 3
		for i := range n {
			res := receiveBody(t, b, "github", fmt.Sprint("forged-", i), "delete", replayBody, replayWindow)
			if res.Outcome != ferry.ReceiveReplay || res.ID != first.ID || res.CountedOnly != (i >= ferry.NoticeKeep) {
				t.Fatalf("replay %d = %+v, want a replay of %d, counted only past %d", i, res, first.ID, ferry.NoticeKeep)
			}
		}
		if ev := get(t, b, first.ID); ev.Replays != n {
			t.Errorf("replays counted %d, want %d", ev.Replays, n)
		}
		if stats, err := b.store.EventStats(b.ctx, &ferry.EventStatsParams{}); err != nil || len(stats.Sources) != 1 || stats.Sources[0].Replays != n {
			t.Errorf("stats = %+v, %v; want github's %d replays, kept or not", stats, err, n)
		}
		list := replays(t, b, first.ID)
		if len(list) != ferry.NoticeKeep || list[0].ClaimedEventID != "forged-0" || list[len(list)-1].ClaimedEventID != fmt.Sprint("forged-", ferry.NoticeKeep-1) {
			t.Fatalf("%d replays kept, want the first %d", len(list), ferry.NoticeKeep)
		}
		// Another event's body has its own rows.
		other := receiveBody(t, b, "github", "d-2", "push", []byte(`{"other":1}`), replayWindow)
		if res := receiveBody(t, b, "github", "d-3", "push", []byte(`{"other":1}`), replayWindow); res.ID != other.ID || res.CountedOnly {
			t.Errorf("another event's first replay = %+v, want kept on %d", res, other.ID)
		}
	})

	run(t, setup, "ListedUpToTheLimit", func(t *testing.T, b *bundle[TX]) {
		first := receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		for i := range 3 {
			receiveBody(t, b, "github", fmt.Sprint("forged-", i), "delete", replayBody, replayWindow)
		}
		list, err := b.store.ReplayList(b.ctx, &ferry.ReplayListParams{ID: first.ID, Limit: 2})
		if err != nil || len(list) != 2 || list[0].ClaimedEventID != "forged-0" || list[1].ClaimedEventID != "forged-1" {
			t.Fatalf("ReplayList(limit 2) = %d replays, %v; want the oldest two", len(list), err)
		}
		if list, err := b.store.ReplayList(b.ctx, &ferry.ReplayListParams{ID: first.ID}); err != nil || len(list) != 3 {
			t.Fatalf("ReplayList() = %d, %v; want all three", len(list), err)
		}
		if _, err := b.store.ReplayList(b.ctx, &ferry.ReplayListParams{ID: first.ID, Limit: -1}); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("ReplayList(limit -1): err = %v, want ErrInvalidParams", err)
		}
	})

	run(t, setup, "ManyAsIfOneAfterTheOther", func(t *testing.T, b *bundle[TX]) {
		other := []byte(`{"other":1}`)
		r := func(source, id string, body []byte, window time.Duration) *ferry.EventReceiveParams {
			return &ferry.EventReceiveParams{Source: source, EventID: id, Type: "push", Payload: body, ReplayWindow: window}
		}
		results, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
			r("github", "d-1", replayBody, replayWindow),
			r("github", "d-2", replayBody, replayWindow),
			r("github", "d-3", other, replayWindow),
			r("github", "d-3", other, replayWindow),
			r("stripe", "evt_1", replayBody, 0),
			r("stripe", "evt_2", replayBody, 0),
			r("github", "d-4", replayBody, replayWindow),
		}})
		if err != nil {
			t.Fatal(err)
		}
		want := []ferry.ReceiveOutcome{ferry.ReceiveNew, ferry.ReceiveReplay, ferry.ReceiveNew, ferry.ReceiveDuplicate, ferry.ReceiveNew, ferry.ReceiveNew, ferry.ReceiveReplay}
		for i, res := range results {
			if res.Err != nil || res.Result.Outcome != want[i] {
				t.Errorf("receipt %d: %+v, %v; want %s", i, res.Result, res.Err, want[i])
			}
		}
		d1 := results[0].Result.ID
		if results[1].Result.ID != d1 || results[6].Result.ID != d1 {
			t.Errorf("replays name %d and %d, want d-1's %d", results[1].Result.ID, results[6].Result.ID, d1)
		}
		if ev := get(t, b, d1); ev.Replays != 2 {
			t.Errorf("d-1 replays %d, want 2", ev.Replays)
		}
		if n := countEvents(t, b); n != 4 {
			t.Errorf("%d events stored, want 4 (d-1, d-3, evt_1, evt_2)", n)
		}
		// The first to arrive is the original, whatever the key order.
		results, err = b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
			r("github", "z-9", []byte("late"), replayWindow), r("github", "a-1", []byte("late"), replayWindow),
		}})
		if err != nil || results[0].Result.Outcome != ferry.ReceiveNew || results[1].Result.Outcome != ferry.ReceiveReplay {
			t.Fatalf("z-9 then a-1 = %+v %+v, %v; want new, replay", results[0].Result, results[1].Result, err)
		}
		// A later batch sees the stored body too.
		results, err = b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
			r("github", "d-5", replayBody, replayWindow), r("github", "d-6", []byte("new"), replayWindow),
		}})
		if err != nil || results[0].Result.Outcome != ferry.ReceiveReplay || results[1].Result.Outcome != ferry.ReceiveNew {
			t.Fatalf("second batch = %+v %+v, %v; want replay, new", results[0].Result, results[1].Result, err)
		}
	})

	run(t, setup, "ListedWithTheEvent", func(t *testing.T, b *bundle[TX]) {
		first := receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		receiveBody(t, b, "github", "d-2", "delete", replayBody, replayWindow)
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
		if err != nil || len(page.Events) != 1 || page.Events[0].Replays != 1 {
			t.Fatalf("list = %+v, %v; want one event with one replay", page, err)
		}
		if c := claimOne(t, b, "w"); c.Event.ID != first.ID || c.Event.Replays != 1 {
			t.Errorf("claimed %+v, want the first event with its replay count", c.Event)
		}
	})

	run(t, setup, "CountedInStats", func(t *testing.T, b *bundle[TX]) {
		receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		receiveBody(t, b, "github", "d-2", "delete", replayBody, replayWindow)
		receiveBody(t, b, "github", "d-3", "delete", replayBody, replayWindow)
		receiveBody(t, b, "stripe", "evt_1", "x", replayBody, 0)
		stats, err := b.store.EventStats(b.ctx, &ferry.EventStatsParams{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, s := range stats.Sources {
			got[s.Source] = s.Replays
		}
		if got["github"] != 2 || got["stripe"] != 0 {
			t.Errorf("replays by source = %v, want github 2, stripe 0", got)
		}
	})

	// A done event's replays still count: stats read the replayed events
	// wherever they are, not only the live ones.
	run(t, setup, "CountedInStatsOnceDone", func(t *testing.T, b *bundle[TX]) {
		first := receiveBody(t, b, "github", "d-1", "push", replayBody, replayWindow)
		receiveBody(t, b, "github", "d-2", "delete", replayBody, replayWindow)
		receiveBody(t, b, "github", "d-3", "push", []byte(`{"other":1}`), replayWindow)
		c := claimOne(t, b, "w")
		if c.Event.ID != first.ID {
			t.Fatalf("claimed %d, want the replayed event %d first", c.Event.ID, first.ID)
		}
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		stats, err := b.store.EventStats(b.ctx, &ferry.EventStatsParams{})
		if err != nil || len(stats.Sources) != 1 {
			t.Fatalf("stats = %+v, %v; want github's", stats, err)
		}
		if s := stats.Sources[0]; s.Replays != 1 || s.States[ferry.StateDone] != 1 || s.States[ferry.StatePending] != 1 {
			t.Errorf("github: %d replays, %d done, %d pending; want 1, 1, 1", s.Replays, s.States[ferry.StateDone], s.States[ferry.StatePending])
		}
	})
}
