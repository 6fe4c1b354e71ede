package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// testOrigin pins EventReceiveParams.Origin: recorded with a new key, kept
// by a known one, read back by EventGet, EventList and claims.
func testOrigin[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	receiveFrom := func(t *testing.T, b *bundle[TX], eventID string, origin ferry.Origin) *ferry.EventReceiveResult {
		t.Helper()
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: eventID, Type: "test.event",
			Payload: []byte(`{"id":"` + eventID + `"}`), Origin: origin,
		})
		if err != nil {
			t.Fatalf("EventReceive(%s, %q): %v", eventID, origin, err)
		}
		return res
	}
	listed := func(t *testing.T, b *bundle[TX]) map[string]ferry.Origin {
		t.Helper()
		res, err := b.store.EventList(b.ctx, &ferry.EventListParams{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]ferry.Origin{}
		for _, e := range res.Events {
			out[e.EventID] = e.Origin
		}
		return out
	}

	run(t, setup, "DefaultIsDelivery", func(t *testing.T, b *bundle[TX]) {
		id := receiveFrom(t, b, "evt_1", "").ID
		if got := get(t, b, id).Origin; got != ferry.OriginDelivery {
			t.Fatalf("EventGet origin = %q, want delivery", got)
		}
		if got := listed(t, b)["evt_1"]; got != ferry.OriginDelivery {
			t.Fatalf("EventList origin = %q, want delivery", got)
		}
	})

	run(t, setup, "CatchupIsReadBack", func(t *testing.T, b *bundle[TX]) {
		id := receiveFrom(t, b, "evt_1", ferry.OriginCatchup).ID
		if got := get(t, b, id).Origin; got != ferry.OriginCatchup {
			t.Fatalf("EventGet origin = %q, want catchup", got)
		}
		ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_1"})
		if err != nil || ev.Origin != ferry.OriginCatchup {
			t.Fatalf("EventGet by key origin = %v, %v; want catchup", ev, err)
		}
		if got := listed(t, b)["evt_1"]; got != ferry.OriginCatchup {
			t.Fatalf("EventList origin = %q, want catchup", got)
		}
		if got := claimOne(t, b, "w").Event.Origin; got != ferry.OriginCatchup {
			t.Fatalf("claimed event origin = %q, want catchup", got)
		}
	})

	run(t, setup, "KnownKeyKeepsItsOrigin", func(t *testing.T, b *bundle[TX]) {
		first := receiveFrom(t, b, "evt_c", ferry.OriginCatchup)
		if res := receiveFrom(t, b, "evt_c", ferry.OriginDelivery); res.Outcome != ferry.ReceiveDuplicate {
			t.Fatalf("second receipt outcome = %s, want duplicate", res.Outcome)
		}
		receiveFrom(t, b, "evt_d", ferry.OriginDelivery)
		receiveFrom(t, b, "evt_d", ferry.OriginCatchup)
		if got := get(t, b, first.ID); got.Origin != ferry.OriginCatchup || got.Deliveries != 2 {
			t.Fatalf("evt_c origin %q deliveries %d, want catchup and 2", got.Origin, got.Deliveries)
		}
		if got := listed(t, b)["evt_d"]; got != ferry.OriginDelivery {
			t.Fatalf("evt_d origin = %q, want delivery (the first receipt decides)", got)
		}
	})

	run(t, setup, "BothWaysAtOnceStoreOne", func(t *testing.T, b *bundle[TX]) {
		_, news := receiveAtOnce(t, b, 8, ferry.ReceiveDuplicate, func(i int) *ferry.EventReceiveParams {
			return &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_race", Payload: []byte(`{}`), Origin: alternate(i)}
		})
		if news != 1 {
			t.Fatalf("%d receipts were new, want 1", news)
		}
		if claims := claim(t, b, "w", 10); len(claims) != 1 {
			t.Fatalf("claimed %d events, want 1", len(claims))
		}
	})

	run(t, setup, "ConcurrentReceiptsKeepTheirOrigin", func(t *testing.T, b *bundle[TX]) {
		// Receipts that queue together are written together (group
		// commit): each keeps its own origin.
		atOnce(32, func(i int) {
			_, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
				Source: "stripe", EventID: fmt.Sprintf("evt_%02d", i), Payload: []byte(`{}`), Origin: alternate(i),
			})
			if err != nil {
				t.Error(err)
			}
		})
		got := listed(t, b)
		for i := range 32 {
			if id, want := fmt.Sprintf("evt_%02d", i), alternate(i); got[id] != want {
				t.Errorf("%s origin %q, want %q", id, got[id], want)
			}
		}
	})

	run(t, setup, "InvalidIsRefused", func(t *testing.T, b *bundle[TX]) {
		_, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Origin: "carrier-pigeon"})
		if !errors.Is(err, ferry.ErrInvalidParams) {
			t.Fatalf("err = %v, want ErrInvalidParams", err)
		}
	})
}

// alternate is the origin of the i-th of a run of receipts: delivery, then
// catchup, and so on.
func alternate(i int) ferry.Origin {
	if i%2 == 1 {
		return ferry.OriginCatchup
	}
	return ferry.OriginDelivery
}
