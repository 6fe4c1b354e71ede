package storetest

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// receiveAtOnce makes the n receipts params gives, all at once, and checks
// that they are stored as one event: each is new or else, and all have one
// id. It returns that id and how many receipts were new.
func receiveAtOnce[TX any](t *testing.T, b *bundle[TX], n int, orElse ferry.ReceiveOutcome, params func(i int) *ferry.EventReceiveParams) (id int64, news int) {
	t.Helper()
	outcomes := make([]ferry.ReceiveOutcome, n)
	ids := make([]int64, n)
	atOnce(n, func(i int) {
		res, err := b.store.EventReceive(b.ctx, params(i))
		if err != nil {
			t.Errorf("receive %d: %v", i, err)
			return
		}
		outcomes[i], ids[i] = res.Outcome, res.ID
	})
	for i := range n {
		if outcomes[i] == ferry.ReceiveNew {
			news++
		} else if outcomes[i] != orElse {
			t.Errorf("receive %d outcome %s", i, outcomes[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("receive %d id %d, want %d", i, ids[i], ids[0])
		}
	}
	return ids[0], news
}

// testReceive checks EventReceive and EventGet: new, duplicate and conflicting deliveries.
func testReceive[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	run(t, setup, "NewIsPendingAndDueNow", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		ev := wantState(t, b, id, ferry.StatePending)
		now := b.clock.Now()
		if ev.Source != "stripe" || ev.EventID != "evt_1" || ev.Type != "test.event" {
			t.Errorf("key = (%s, %s, %s)", ev.Source, ev.EventID, ev.Type)
		}
		if string(ev.Payload) != `{"id":"evt_1"}` || ev.Headers.Get("Content-Type") != "application/json" {
			t.Errorf("payload %q headers %v not kept", ev.Payload, ev.Headers)
		}
		if len(ev.PayloadSHA256) != 32 {
			t.Errorf("payload hash has %d bytes", len(ev.PayloadSHA256))
		}
		if ev.Attempt != 0 || ev.Deliveries != 1 || ev.Conflicts != 0 {
			t.Errorf("attempt %d deliveries %d conflicts %d", ev.Attempt, ev.Deliveries, ev.Conflicts)
		}
		if !ev.NextAttemptAt.Equal(now) || !ev.FirstDeliveredAt.Equal(now) || !ev.LastDeliveredAt.Equal(now) {
			t.Errorf("times next %v first %v last %v, want %v", ev.NextAttemptAt, ev.FirstDeliveredAt, ev.LastDeliveredAt, now)
		}
		if !ev.LeaseExpiresAt.IsZero() || ev.LeaseOwner != "" || !ev.ClaimedAt.IsZero() || !ev.CompletedAt.IsZero() {
			t.Errorf("fresh event has lease or claim: %+v", ev)
		}
	})

	run(t, setup, "DuplicateCountsDelivery", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		b.clock.Advance(time.Minute)
		res := receiveWith(t, b, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Type: "test.event", Payload: []byte(`{"id":"evt_1"}`)})
		if res.Outcome != ferry.ReceiveDuplicate || res.ID != id {
			t.Fatalf("outcome %s id %d, want duplicate %d", res.Outcome, res.ID, id)
		}
		ev := get(t, b, id)
		if ev.Deliveries != 2 || !ev.LastDeliveredAt.Equal(b.clock.Now()) || ev.FirstDeliveredAt.Equal(ev.LastDeliveredAt) {
			t.Errorf("deliveries %d first %v last %v", ev.Deliveries, ev.FirstDeliveredAt, ev.LastDeliveredAt)
		}
	})

	run(t, setup, "SameEventIDOtherSourceIsNew", func(t *testing.T, b *bundle[TX]) {
		a := receive(t, b, "stripe", "evt_1")
		c := receive(t, b, "github", "evt_1")
		if a == c {
			t.Fatal("two sources share a row")
		}
	})

	run(t, setup, "ConflictIsKept", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: "evt_1", Payload: []byte(`{"id":"evt_1","forged":true}`),
			Headers: http.Header{"X-Test": {"conflict"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != ferry.ReceiveConflict || res.ID != id {
			t.Fatalf("outcome %s id %d, want conflict %d", res.Outcome, res.ID, id)
		}
		ev := get(t, b, id)
		if ev.Deliveries != 2 || ev.Conflicts != 1 || string(ev.Payload) != `{"id":"evt_1"}` {
			t.Errorf("deliveries %d conflicts %d payload %q: the first payload must stay", ev.Deliveries, ev.Conflicts, ev.Payload)
		}
		conflicts, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(conflicts) != 1 || string(conflicts[0].Payload) != `{"id":"evt_1","forged":true}` ||
			conflicts[0].Headers.Get("X-Test") != "conflict" || len(conflicts[0].PayloadSHA256) != 32 {
			t.Fatalf("conflicts = %+v", conflicts)
		}
	})

	// Conflicting deliveries of one key keep NoticeKeep rows on its event,
	// each payload once, the first to arrive; the rest are answered and
	// counted as conflicts and keep nothing, so they cannot fill the disk.
	run(t, setup, "ConflictsKeptUpToNoticeKeepEachPayloadOnce", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		send := func(i int) *ferry.EventReceiveResult {
			t.Helper()
			res := receiveWith(t, b, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(fmt.Sprint("v", i))})
			if res.Outcome != ferry.ReceiveConflict || res.ID != id {
				t.Fatalf("v%d: %+v, want a conflict of %d", i, res, id)
			}
			return res
		}
		if send(0).CountedOnly {
			t.Fatal("the first conflict is counted only, want kept")
		}
		if !send(0).CountedOnly {
			t.Error("a payload kept already is kept again")
		}
		for i := 1; i < ferry.NoticeKeep+3; i++ {
			if res := send(i); res.CountedOnly != (i >= ferry.NoticeKeep) {
				t.Errorf("v%d counted only = %t, want %t", i, res.CountedOnly, i >= ferry.NoticeKeep)
			}
		}
		if ev := get(t, b, id); ev.Conflicts != ferry.NoticeKeep+4 || ev.Deliveries != ferry.NoticeKeep+5 {
			t.Errorf("conflicts %d deliveries %d, want %d and %d: every one counted", ev.Conflicts, ev.Deliveries, ferry.NoticeKeep+4, ferry.NoticeKeep+5)
		}
		kept, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id, Limit: 1000})
		if err != nil || len(kept) != ferry.NoticeKeep {
			t.Fatalf("%d conflicts kept, %v; want %d", len(kept), err, ferry.NoticeKeep)
		}
		for i, c := range kept {
			if string(c.Payload) != fmt.Sprint("v", i) {
				t.Errorf("conflict %d kept %q, want v%d", i, c.Payload, i)
			}
		}
		if page, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id, Limit: 2}); err != nil || len(page) != 2 || string(page[1].Payload) != "v1" {
			t.Errorf("ConflictList(limit 2) = %d, %v; want the oldest two", len(page), err)
		}
	})

	// A batch keeps what its receipts would have kept one after the other.
	run(t, setup, "ManyKeepConflictsAsIfOneAfterTheOther", func(t *testing.T, b *bundle[TX]) {
		known := receive(t, b, "stripe", "known")
		for i := range ferry.NoticeKeep - 2 {
			receiveWith(t, b, &ferry.EventReceiveParams{Source: "stripe", EventID: "known", Payload: []byte(fmt.Sprint("v", i))})
		}
		r := func(eventID, payload string) *ferry.EventReceiveParams {
			return &ferry.EventReceiveParams{Source: "stripe", EventID: eventID, Payload: []byte(payload)}
		}
		// known keeps two more: v0 is kept already, "b" once, then the cap.
		results, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
			r("known", "v0"), r("new", "a"), r("known", "b"), r("new", "b"), r("known", "b"),
			r("new", "b"), r("known", "c"), r("known", "d"), r("new", "c"),
		}})
		if err != nil {
			t.Fatal(err)
		}
		want := []bool{true, false, false, false, true, true, false, true, false}
		for i, res := range results {
			if res.Err != nil || (res.Result.Outcome == ferry.ReceiveConflict) != (i != 1) || res.Result.CountedOnly != want[i] {
				t.Errorf("receipt %d = %+v, %v; want counted only %t", i, res.Result, res.Err, want[i])
			}
		}
		payloads := func(id int64) (out []string) {
			kept, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range kept {
				out = append(out, string(c.Payload))
			}
			return out
		}
		if got := payloads(known); len(got) != ferry.NoticeKeep || got[ferry.NoticeKeep-2] != "b" || got[ferry.NoticeKeep-1] != "c" {
			t.Errorf("known keeps %q, want v0..v%d, b, c", got, ferry.NoticeKeep-3)
		}
		if got := payloads(results[1].Result.ID); !slices.Equal(got, []string{"b", "c"}) {
			t.Errorf("new keeps %q, want b, c", got)
		}
		if ev := get(t, b, known); ev.Conflicts != ferry.NoticeKeep+3 {
			t.Errorf("known counts %d conflicts, want %d", ev.Conflicts, ferry.NoticeKeep+3)
		}
	})

	run(t, setup, "GetByKeyAndNotFound", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_1"})
		if err != nil || ev.ID != id {
			t.Fatalf("EventGet by key = %v, %v", ev, err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: "nope"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("missing key err = %v, want ErrNotFound", err)
		}
		if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id + 1000}); !errors.Is(err, ferry.ErrNotFound) {
			t.Errorf("missing id err = %v, want ErrNotFound", err)
		}
	})

	run(t, setup, "ConcurrentSameKeyStoresOne", func(t *testing.T, b *bundle[TX]) {
		const n = 16
		id, news := receiveAtOnce(t, b, n, ferry.ReceiveDuplicate, func(int) *ferry.EventReceiveParams {
			return &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_same", Payload: []byte("same")}
		})
		if news != 1 {
			t.Errorf("%d receives were new, want 1", news)
		}
		if ev := get(t, b, id); ev.Deliveries != n {
			t.Errorf("deliveries = %d, want %d", ev.Deliveries, n)
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
		if err != nil || len(page.Events) != 1 {
			t.Fatalf("list: %d events, %v; want 1", len(page.Events), err)
		}
	})

	run(t, setup, "RedeliveryKeepsTheFirstReceipt", func(t *testing.T, b *bundle[TX]) {
		start := b.clock.Now()
		id := receive(t, b, "stripe", "evt_1")
		if id == 0 {
			t.Fatal("a new event has id 0")
		}
		b.clock.Advance(time.Minute)
		for _, payload := range []string{`{"id":"evt_1"}`, `{"id":"evt_1","v":2}`} {
			receiveWith(t, b, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(payload)})
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if ev.Deliveries != 3 || ev.Conflicts != 1 {
			t.Errorf("deliveries %d conflicts %d, want 3 and 1", ev.Deliveries, ev.Conflicts)
		}
		// A redelivery counts, but neither moves the first receipt nor
		// makes the event due again.
		if !ev.FirstDeliveredAt.Equal(start) || !ev.NextAttemptAt.Equal(start) || !ev.LastDeliveredAt.Equal(start.Add(time.Minute)) {
			t.Errorf("first %v next %v last %v, want %v, %v and a minute later", ev.FirstDeliveredAt, ev.NextAttemptAt, ev.LastDeliveredAt, start, start)
		}
		for name, at := range map[string]time.Time{"first": ev.FirstDeliveredAt, "last": ev.LastDeliveredAt, "next": ev.NextAttemptAt} {
			if at.Location() != time.UTC {
				t.Errorf("%s delivered at %v is not in UTC", name, at)
			}
		}
		conflicts, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id})
		if err != nil || len(conflicts) != 1 || conflicts[0].EventID != id {
			t.Fatalf("conflicts = %+v, %v; want one of event %d", conflicts, err, id)
		}
	})

	run(t, setup, "EmptyPayloadNoHeaders", func(t *testing.T, b *bundle[TX]) {
		res := receiveWith(t, b, &ferry.EventReceiveParams{Source: "s", EventID: "e"})
		ev := get(t, b, res.ID)
		if len(ev.Payload) != 0 || ev.Headers != nil || len(ev.PayloadSHA256) != 32 {
			t.Errorf("event = %+v, want empty payload, nil headers, a hash", ev)
		}
	})

	// A batch gives each receipt the outcome it would have had alone, in
	// order, including several deliveries of one key; an invalid receipt is
	// refused alone and its neighbours are stored.
	run(t, setup, "ManyIsOneAtATimeInOneCommit", func(t *testing.T, b *bundle[TX]) {
		known := receive(t, b, "stripe", "known")
		params := []*ferry.EventReceiveParams{
			{Source: "stripe", EventID: "k", Payload: []byte("a")},
			{Source: "stripe", EventID: "known", Payload: []byte(`{"id":"known"}`)},
			{Source: "stripe", EventID: "k", Payload: []byte("a")},
			{Source: "", EventID: "invalid"},
			{Source: "stripe", EventID: "k", Payload: []byte("b")},
			{Source: "github", EventID: "k"},
		}
		res, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: params})
		if err != nil {
			t.Fatal(err)
		}
		want := []ferry.ReceiveOutcome{ferry.ReceiveNew, ferry.ReceiveDuplicate, ferry.ReceiveDuplicate, "", ferry.ReceiveConflict, ferry.ReceiveNew}
		if len(res) != len(params) {
			t.Fatalf("%d results for %d receipts", len(res), len(params))
		}
		for i, r := range res {
			if want[i] == "" {
				if !errors.Is(r.Err, ferry.ErrInvalidParams) || r.Result != nil {
					t.Errorf("receipt %d: %+v, want ErrInvalidParams alone", i, r)
				}
				continue
			}
			if r.Err != nil || r.Result.Outcome != want[i] {
				t.Errorf("receipt %d: %+v, want %s", i, r, want[i])
			}
		}
		if res[1].Result.ID != known || res[0].Result.ID != res[2].Result.ID || res[0].Result.ID != res[4].Result.ID {
			t.Errorf("ids %d %d %d %d: want known's and one id for k", res[0].Result.ID, res[1].Result.ID, res[2].Result.ID, res[4].Result.ID)
		}
		ev := get(t, b, res[0].Result.ID)
		if string(ev.Payload) != "a" || ev.Deliveries != 3 || ev.Conflicts != 1 {
			t.Errorf("k = payload %q, %d deliveries, %d conflicts; want a, 3, 1", ev.Payload, ev.Deliveries, ev.Conflicts)
		}
		if got, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{}); err != nil || len(got) != 0 {
			t.Errorf("no receipts = %v, %v; want a no-op", got, err)
		}
	})
}
