package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// testHistory checks that done events stay part of the inbox wherever a
// store keeps them (PostgreSQL moves them to an archive): dedupe, conflicts,
// get by id and key, the ledger, requeue and listing across live and done
// events.
func testHistory[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	t.Run("DoneEventStillDedupes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := receive(t, b, "s", "e")
		mustComplete(t, b, claimOne(t, b, "w").Event.Lease())

		same := redeliver(t, b, "s", "e", `{"id":"e"}`)
		other := redeliver(t, b, "s", "e", "changed")
		if same.ID != id || same.Outcome != ferry.ReceiveDuplicate || other.ID != id || other.Outcome != ferry.ReceiveConflict {
			t.Fatalf("redeliveries of a done event: %+v, %+v; want duplicate and conflict of %d", same, other, id)
		}
		ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "s", EventID: "e"})
		if err != nil || ev.ID != id || ev.State != ferry.StateDone || ev.Deliveries != 3 || ev.Conflicts != 1 {
			t.Fatalf("done event by key: %+v, %v; want done, 3 deliveries, 1 conflict", ev, err)
		}
		if got, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: id}); err != nil || len(got) != 1 || string(got[0].Payload) != "changed" {
			t.Fatalf("conflicts of a done event: %+v, %v", got, err)
		}
		wantOutcomes(t, b, id, ferry.OutcomeDone)
		notices, err := b.store.ConflictNoticeList(b.ctx, &ferry.NoticeListParams{Source: "s"})
		if err != nil || len(notices) != 1 || notices[0].EventRowID != id || notices[0].EventID != "e" {
			t.Fatalf("conflict notices of a done event: %+v, %v; want one for %d", notices, err, id)
		}

		// Back to pending and done again: one event, one id, its whole ledger.
		if err := requeueAndCompleteSource(b, id, "s"); err != nil {
			t.Fatal(err)
		}
		if res := redeliver(t, b, "s", "e", `{"id":"e"}`); res.ID != id || res.Outcome != ferry.ReceiveDuplicate {
			t.Fatalf("redelivery after a requeue: %+v", res)
		}
		ev = wantState(t, b, id, ferry.StateDone)
		if ev.Deliveries != 4 || ev.Attempt != 2 {
			t.Fatalf("after requeue and redelivery: %d deliveries, attempt %d; want 4, 2", ev.Deliveries, ev.Attempt)
		}
		wantOutcomes(t, b, id, ferry.OutcomeDone, ferry.OutcomeDone)
	})

	t.Run("ListMergesLiveAndDone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ids []int64
		for i := range 9 {
			ids = append(ids, receive(t, b, "s", fmt.Sprintf("e%d", i)))
		}
		// Every other event done: pages must interleave both kinds by id.
		for _, c := range claim(t, b, "w", 9) {
			if c.Event.ID%2 == 0 {
				mustComplete(t, b, c.Event.Lease())
			}
		}
		var seen []int64
		before := int64(0)
		for range 10 {
			page, err := b.store.EventList(b.ctx, &ferry.EventListParams{Limit: 2, Before: before})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				seen = append(seen, ev.ID)
				want := ferry.StateInProgress
				if ev.ID%2 == 0 {
					want = ferry.StateDone
				}
				if ev.State != want {
					t.Fatalf("event %d listed as %s", ev.ID, ev.State)
				}
			}
			if before = page.NextBefore; before == 0 {
				break
			}
		}
		want := slices.Clone(ids)
		slices.Reverse(want)
		if !slices.Equal(seen, want) {
			t.Fatalf("paged %v, want %v", seen, want)
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateInProgress}, Limit: 100})
		if err != nil || len(page.Events) != 5 {
			t.Fatalf("in_progress filter: %d events, %v; want 5", len(page.Events), err)
		}
	})
}

func redeliver[TX any](t *testing.T, b *bundle[TX], source, eventID, payload string) *ferry.EventReceiveResult {
	t.Helper()
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func requeueAndCompleteSource[TX any](b *bundle[TX], id int64, source string) error {
	if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{id}, Actor: "op"}); err != nil {
		return err
	}
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 10, TTL: ttl, Sources: []string{source}})
	if err != nil {
		return err
	}
	for _, c := range claims {
		if c.Event.ID == id {
			return b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()})
		}
	}
	return fmt.Errorf("requeued event %d not claimed", id)
}
