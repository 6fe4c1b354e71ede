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

	// Catch-up stores the provider API's copy of an event, never the bytes a
	// delivery carries: bytes are compared only between deliveries, one by
	// one, in a batch, and once the event is done.
	run(t, setup, "BytesAreComparedOnlyBetweenDeliveries", func(t *testing.T, b *bundle[TX]) {
		body := func(s string) []byte { return []byte(`{"copy":"` + s + `"}`) }
		one := func(eventID string, origin ferry.Origin, copy string) ferry.ReceiveOutcome {
			t.Helper()
			return receiveWith(t, b, &ferry.EventReceiveParams{Source: "stripe", EventID: eventID, Payload: body(copy), Origin: origin}).Outcome
		}
		many := func(receipts ...*ferry.EventReceiveParams) []ferry.ReceiveOutcome {
			t.Helper()
			res, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: receipts})
			if err != nil {
				t.Fatal(err)
			}
			out := make([]ferry.ReceiveOutcome, len(res))
			for i, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				out[i] = r.Result.Outcome
			}
			return out
		}
		wantConflicts := func(eventID string, want int) {
			t.Helper()
			ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: eventID})
			if err != nil {
				t.Fatal(err)
			}
			kept, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: ev.ID})
			if err != nil {
				t.Fatal(err)
			}
			if ev.Conflicts != want || len(kept) != want {
				t.Errorf("%s: %d conflicts counted, %d kept; want %d", eventID, ev.Conflicts, len(kept), want)
			}
		}
		dup := ferry.ReceiveDuplicate

		one("evt_a", ferry.OriginCatchup, "api")
		if got := []ferry.ReceiveOutcome{one("evt_a", ferry.OriginDelivery, "sent"), one("evt_a", ferry.OriginDelivery, "resent")}; got[0] != dup || got[1] != dup {
			t.Errorf("deliveries after catch-up: %v, want duplicates", got)
		}
		wantConflicts("evt_a", 0)

		one("evt_b", ferry.OriginDelivery, "sent")
		if got := one("evt_b", ferry.OriginCatchup, "api"); got != dup {
			t.Errorf("catch-up after a delivery: %s, want duplicate", got)
		}
		if got := one("evt_b", ferry.OriginDelivery, "forged"); got != ferry.ReceiveConflict {
			t.Errorf("another delivery's bytes: %s, want conflict", got)
		}
		wantConflicts("evt_b", 1)

		got := many(
			&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_c", Payload: body("api"), Origin: ferry.OriginCatchup},
			&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_c", Payload: body("sent")},
			&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_d", Payload: body("sent")},
			&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_d", Payload: body("api"), Origin: ferry.OriginCatchup},
			&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_d", Payload: body("forged")},
			&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_a", Payload: body("again")},
			&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_b", Payload: body("api"), Origin: ferry.OriginCatchup},
		)
		want := []ferry.ReceiveOutcome{ferry.ReceiveNew, dup, ferry.ReceiveNew, dup, ferry.ReceiveConflict, dup, dup}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("one batch: %v, want %v", got, want)
		}
		wantConflicts("evt_c", 0)
		wantConflicts("evt_d", 1)
		wantConflicts("evt_a", 0)
		wantConflicts("evt_b", 1)

		// Done (on PostgreSQL, archived): the key still knows.
		mustComplete(t, b, claimOne(t, b, "w").Event.Lease())
		for _, c := range claim(t, b, "w", 10) {
			mustComplete(t, b, c.Event.Lease())
		}
		if got := one("evt_a", ferry.OriginDelivery, "late"); got != dup {
			t.Errorf("a delivery of the done caught-up event: %s, want duplicate", got)
		}
		if got := many(&ferry.EventReceiveParams{Source: "stripe", EventID: "evt_c", Payload: body("late")}); got[0] != dup {
			t.Errorf("a batched delivery of the done caught-up event: %s, want duplicate", got[0])
		}
		wantConflicts("evt_a", 0)
		wantConflicts("evt_c", 0)
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
