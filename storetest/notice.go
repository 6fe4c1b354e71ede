package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// noticeStore is a store that pages through its notices (pushed alerts
// read them). postgres.Store and sqlite.Store are; a third-party store that
// is not skips these tests.
type noticeStore interface {
	ConflictNoticeList(ctx context.Context, params *ferry.NoticeListParams) ([]*ferry.Notice, error)
	ReplayNoticeList(ctx context.Context, params *ferry.NoticeListParams) ([]*ferry.Notice, error)
}

// testNotice pins ConflictNoticeList: one source's conflicting deliveries,
// oldest first, after a cursor, a page at a time.
func testNotice[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	conflict := func(t *testing.T, b *bundle[TX], source, eventID, body string) {
		t.Helper()
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte(body)})
		if err != nil || res.Outcome != ferry.ReceiveConflict {
			t.Fatalf("EventReceive(%s, %s) = %+v, %v; want a conflict", source, eventID, res, err)
		}
	}
	list := func(t *testing.T, b *bundle[TX], p *ferry.NoticeListParams) []*ferry.Notice {
		t.Helper()
		got, err := b.store.(noticeStore).ConflictNoticeList(b.ctx, p)
		if err != nil {
			t.Fatalf("ConflictNoticeList(%+v): %v", p, err)
		}
		return got
	}

	run(t, setup, "PagesOneSourceAfterACursor", func(t *testing.T, b *bundle[TX]) {
		if _, ok := b.store.(noticeStore); !ok {
			t.Skip("the store lists no notices")
		}
		a := receive(t, b, "stripe", "evt_a")
		other := receive(t, b, "github", "evt_a")
		c := receive(t, b, "stripe", "evt_c")
		conflict(t, b, "stripe", "evt_a", `{"v":2}`)
		conflict(t, b, "github", "evt_a", `{"v":2}`)
		conflict(t, b, "stripe", "evt_c", `{"v":2}`)
		conflict(t, b, "stripe", "evt_a", `{"v":3}`)

		all := list(t, b, &ferry.NoticeListParams{Source: "stripe"})
		var rows []int64
		for _, n := range all {
			rows = append(rows, n.EventRowID)
			if n.Source != "stripe" || n.ReceivedAt.IsZero() {
				t.Errorf("notice %+v", n)
			}
		}
		if len(rows) != 3 || rows[0] != a || rows[1] != c || rows[2] != a || all[0].EventID != "evt_a" || all[1].EventID != "evt_c" {
			t.Fatalf("stripe notices = %v, want rows %d, %d, %d (github's %d left out)", rows, a, c, a, other)
		}
		page := list(t, b, &ferry.NoticeListParams{Source: "stripe", Limit: 1})
		if len(page) != 1 || page[0].ID != all[0].ID {
			t.Fatalf("a page of one = %+v", page)
		}
		rest := list(t, b, &ferry.NoticeListParams{Source: "stripe", AfterID: page[0].ID})
		if len(rest) != 2 || rest[0].ID != all[1].ID || rest[1].ID != all[2].ID {
			t.Fatalf("after the cursor = %+v", rest)
		}
		if got := list(t, b, &ferry.NoticeListParams{Source: "stripe", AfterID: all[2].ID}); len(got) != 0 {
			t.Fatalf("after the last = %+v, want none", got)
		}
	})

	run(t, setup, "ReplaysOfOneSource", func(t *testing.T, b *bundle[TX]) {
		ns, ok := b.store.(noticeStore)
		if !ok {
			t.Skip("the store lists no notices")
		}
		if got, err := ns.ReplayNoticeList(b.ctx, &ferry.NoticeListParams{Source: "github"}); err != nil || len(got) != 0 {
			t.Fatalf("replays = %+v, %v; want none yet", got, err)
		}
		orig := receive(t, b, "github", "delivery-1")
		receive(t, b, "shop", "delivery-1")
		for _, source := range []string{"github", "shop"} {
			res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
				Source: source, EventID: "delivery-2", Payload: []byte(`{"id":"delivery-1"}`), ReplayWindow: time.Hour,
			})
			if err != nil || res.Outcome != ferry.ReceiveReplay {
				t.Fatalf("EventReceive(%s) = %+v, %v; want a replay", source, res, err)
			}
		}
		got, err := ns.ReplayNoticeList(b.ctx, &ferry.NoticeListParams{Source: "github"})
		if err != nil || len(got) != 1 || got[0].EventRowID != orig || got[0].EventID != "delivery-1" || got[0].Source != "github" {
			t.Fatalf("github replays = %+v, %v; want one on row %d", got, err, orig)
		}
		if more, err := ns.ReplayNoticeList(b.ctx, &ferry.NoticeListParams{Source: "github", AfterID: got[0].ID}); err != nil || len(more) != 0 {
			t.Fatalf("after the cursor = %+v, %v; want none", more, err)
		}
	})

	// Each list reads its own kind only, and finds its event's key wherever
	// the event is, done (archived, on PostgreSQL) as well as live.
	run(t, setup, "EachKindOnlyAndDoneEventsToo", func(t *testing.T, b *bundle[TX]) {
		ns, ok := b.store.(noticeStore)
		if !ok {
			t.Skip("the store lists no notices")
		}
		conflicted := receive(t, b, "stripe", "evt_1")
		conflict(t, b, "stripe", "evt_1", `{"v":2}`)
		replayed := receive(t, b, "stripe", "evt_2")
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: "evt_3", Payload: []byte(`{"id":"evt_2"}`), ReplayWindow: time.Hour,
		})
		if err != nil || res.Outcome != ferry.ReceiveReplay {
			t.Fatalf("EventReceive(evt_3) = %+v, %v; want a replay", res, err)
		}
		for range 2 {
			mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		}
		if ev := get(t, b, conflicted); ev.State != ferry.StateDone {
			t.Fatalf("event %d is %s, want done", conflicted, ev.State)
		}
		p := &ferry.NoticeListParams{Source: "stripe"}
		if got := list(t, b, p); len(got) != 1 || got[0].EventRowID != conflicted || got[0].EventID != "evt_1" {
			t.Errorf("conflicts = %+v, want one, on row %d (evt_1)", got, conflicted)
		}
		if got, err := ns.ReplayNoticeList(b.ctx, p); err != nil || len(got) != 1 || got[0].EventRowID != replayed || got[0].EventID != "evt_2" {
			t.Errorf("replays = %+v, %v; want one, on row %d (evt_2)", got, err, replayed)
		}
	})

	run(t, setup, "SourceRequired", func(t *testing.T, b *bundle[TX]) {
		ns, ok := b.store.(noticeStore)
		if !ok {
			t.Skip("the store lists no notices")
		}
		for name, f := range map[string]func(context.Context, *ferry.NoticeListParams) ([]*ferry.Notice, error){
			"ConflictNoticeList": ns.ConflictNoticeList, "ReplayNoticeList": ns.ReplayNoticeList,
		} {
			if _, err := f(b.ctx, &ferry.NoticeListParams{}); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("%s without a source: err = %v, want ErrInvalidParams", name, err)
			}
		}
	})
}
