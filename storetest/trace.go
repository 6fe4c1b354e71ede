package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// Trace contexts as a traced receiver stores them.
const (
	traceparentA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceparentB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tracestateA  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// testTrace checks that the trace context of a receipt is stored with its
// event and read back by every read that returns a whole event, so that an
// attempt in another process links to the receipt's span.
func testTrace[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	wantTrace := func(t *testing.T, what string, ev *ferry.Event, traceparent, tracestate string) {
		t.Helper()
		if ev.Traceparent != traceparent || ev.Tracestate != tracestate {
			t.Errorf("%s: trace context (%q, %q), want (%q, %q)", what, ev.Traceparent, ev.Tracestate, traceparent, tracestate)
		}
	}

	run(t, setup, "ReceiveKeepsItForGetAndClaim", func(t *testing.T, b *bundle[TX]) {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: "evt_1", Payload: []byte(`{}`),
			Traceparent: traceparentA, Tracestate: tracestateA,
		})
		if err != nil {
			t.Fatal(err)
		}
		wantTrace(t, "EventGet by id", get(t, b, res.ID), traceparentA, tracestateA)
		byKey, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_1"})
		if err != nil {
			t.Fatal(err)
		}
		wantTrace(t, "EventGet by key", byKey, traceparentA, tracestateA)
		wantTrace(t, "EventClaimMany", claimOne(t, b, "w1").Event, traceparentA, tracestateA)
	})

	run(t, setup, "UntracedReceiptHasNone", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		wantTrace(t, "EventGet", get(t, b, id), "", "")
		wantTrace(t, "EventClaimMany", claimOne(t, b, "w1").Event, "", "")
	})

	// The trace is the first receipt's: a redelivery, traced in another
	// trace, is counted on the event and leaves its trace alone.
	run(t, setup, "RedeliveryKeepsTheFirst", func(t *testing.T, b *bundle[TX]) {
		first := &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte(`{}`), Traceparent: traceparentA}
		res := receiveWith(t, b, first)
		again := *first
		again.Traceparent, again.Tracestate = traceparentB, tracestateA
		receiveWith(t, b, &again)
		ev := get(t, b, res.ID)
		if ev.Deliveries != 2 {
			t.Fatalf("deliveries = %d, want 2", ev.Deliveries)
		}
		wantTrace(t, "after a redelivery", ev, traceparentA, "")
	})

	// EventReceiveMany stores each receipt's own trace, in a batch of
	// several (one statement) and in a batch of one.
	run(t, setup, "ReceiveManyKeepsEach", func(t *testing.T, b *bundle[TX]) {
		receipts := []*ferry.EventReceiveParams{
			{Source: "stripe", EventID: "evt_a", Payload: []byte(`a`), Traceparent: traceparentA, Tracestate: tracestateA},
			{Source: "stripe", EventID: "evt_b", Payload: []byte(`b`)},
			{Source: "github", EventID: "evt_c", Payload: []byte(`c`), Traceparent: traceparentB},
			{Source: "stripe", EventID: "evt_a", Payload: []byte(`a`), Traceparent: traceparentB},
		}
		results, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: receipts})
		if err != nil {
			t.Fatal(err)
		}
		single, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
			{Source: "stripe", EventID: "evt_d", Payload: []byte(`d`), Traceparent: traceparentB, Tracestate: tracestateA},
		}})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, single...)
		for i, r := range results {
			if r.Err != nil {
				t.Fatalf("receipt %d: %v", i, r.Err)
			}
		}
		wantTrace(t, "evt_a", get(t, b, results[0].Result.ID), traceparentA, tracestateA)
		wantTrace(t, "evt_b", get(t, b, results[1].Result.ID), "", "")
		wantTrace(t, "evt_c", get(t, b, results[2].Result.ID), traceparentB, "")
		wantTrace(t, "evt_d", get(t, b, results[4].Result.ID), traceparentB, tracestateA)
	})

	// Receipts under replay detection take another path in a store (a
	// lock, a statement each): it keeps the trace as well.
	run(t, setup, "ReplayDetectingReceiveKeepsIt", func(t *testing.T, b *bundle[TX]) {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "github", EventID: "d1", Payload: []byte(`one`), ReplayWindow: time.Hour,
			Traceparent: traceparentA, Tracestate: tracestateA,
		})
		if err != nil {
			t.Fatal(err)
		}
		wantTrace(t, "EventReceive", get(t, b, res.ID), traceparentA, tracestateA)
		results, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{
			{Source: "github", EventID: "d2", Payload: []byte(`two`), ReplayWindow: time.Hour, Traceparent: traceparentB},
			{Source: "github", EventID: "d3", Payload: []byte(`three`), ReplayWindow: time.Hour, Traceparent: traceparentA, Tracestate: tracestateA},
		}})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if r.Err != nil || r.Result.Outcome != ferry.ReceiveNew {
				t.Fatalf("receipt %d: %+v", i, r)
			}
		}
		wantTrace(t, "EventReceiveMany d2", get(t, b, results[0].Result.ID), traceparentB, "")
		wantTrace(t, "EventReceiveMany d3", get(t, b, results[1].Result.ID), traceparentA, tracestateA)
	})

	// A trace context that cannot be a header value, or is longer than the
	// bounds, is refused like any invalid param, and nothing is stored.
	run(t, setup, "RefusesBadTraceContext", func(t *testing.T, b *bundle[TX]) {
		for name, p := range map[string]*ferry.EventReceiveParams{
			"LongTraceparent":      {Traceparent: strings.Repeat("0", ferry.TraceparentMaxLen+1)},
			"LongTracestate":       {Tracestate: strings.Repeat("a", ferry.TracestateMaxLen+1)},
			"NewlineInTraceparent": {Traceparent: traceparentA + "\n"},
			"NonASCIITracestate":   {Tracestate: "congo=é"},
		} {
			p.Source, p.EventID, p.Payload = "stripe", "evt_"+name, []byte(`{}`)
			if _, err := b.store.EventReceive(b.ctx, p); !errors.Is(err, ferry.ErrInvalidParams) {
				t.Errorf("EventReceive %s: err = %v, want ErrInvalidParams", name, err)
			}
			res, err := b.store.EventReceiveMany(b.ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{p}})
			if err != nil || len(res) != 1 || !errors.Is(res[0].Err, ferry.ErrInvalidParams) {
				t.Errorf("EventReceiveMany %s: %v, %+v, want the receipt's ErrInvalidParams", name, err, res)
			}
			if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{Source: "stripe", EventID: p.EventID}); !errors.Is(err, ferry.ErrNotFound) {
				t.Errorf("%s was stored: EventGet err = %v", name, err)
			}
		}
		// At the bounds, it is kept as it is.
		p := &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_max", Payload: []byte(`{}`),
			Traceparent: strings.Repeat("0", ferry.TraceparentMaxLen), Tracestate: strings.Repeat("a", ferry.TracestateMaxLen)}
		res := receiveWith(t, b, p)
		wantTrace(t, "at the bounds", get(t, b, res.ID), p.Traceparent, p.Tracestate)
	})
}
