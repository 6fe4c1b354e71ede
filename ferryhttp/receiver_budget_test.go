package ferryhttp_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// heldStore is a real store whose receipts wait for a release, so that a
// test can keep a body in flight.
type heldStore struct {
	ferry.Store
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) EventReceiveMany(ctx context.Context, p *ferry.EventReceiveManyParams) ([]ferry.EventReceiveManyResult, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.EventReceiveMany(ctx, p)
}

// headersOnly sends d's request line and headers, with d's Content-Length,
// and never its body, then reads the answer: only a receiver that answers
// without reading the body answers at all.
func headersOnly(t *testing.T, b *bundle, d delivery) reply {
	t.Helper()
	conn := testhttp.PartialPost(t, b.srv.Listener.Addr().String(), "/webhooks/"+d.source, d.header, len(d.body), "")
	status, header, raw := testhttp.ReadResponse(t, conn)
	r := reply{status: status, header: header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// holdFirstBody starts a receiver with a budget of 16 KiB on a store that
// holds every receipt until release, and sends evt_first, 12 KiB. It
// returns once that body is held in flight, with the channel its answer
// comes on.
func holdFirstBody(t *testing.T) (b *bundle, release func(), first <-chan reply) {
	t.Helper()
	st := &heldStore{Store: teststore.SQLite(t, nil), entered: make(chan struct{}, 1), release: make(chan struct{})}
	b = setup(t, st, func(o *ferryhttp.ReceiverOptions) { o.MaxInFlightBytes = 16 << 10 })
	release = sync.OnceFunc(func() { close(st.release) })
	t.Cleanup(release) // before the server closes: a held request would keep it open
	answered := make(chan reply, 1)
	go func() {
		r, err := b.do(stripe(stripeBodyOfSize("evt_first", 12<<10)))
		if err != nil {
			t.Error(err)
		}
		answered <- r
	}()
	select {
	case <-st.entered:
	case <-time.After(time.Minute):
		t.Fatal("the first delivery never reached the store")
	}
	return b, release, answered
}

// Past MaxInFlightBytes the receiver answers 503 + Retry-After before it
// reads a body; once the bodies in flight are stored, the budget is free
// again.
func TestReceiverMemoryBudget(t *testing.T) {
	t.Parallel()
	b, release, answered := holdFirstBody(t)
	over := stripe(stripeBodyOfSize("evt_over", 8<<10)) // 12 + 8 KiB > 16 KiB
	assertUnavailable(t, headersOnly(t, b, over), "5", "memory_budget")

	release()
	if r := <-answered; r.status != http.StatusOK {
		t.Fatalf("first delivery: %d %s", r.status, r.raw)
	}
	// The first body is stored and its bytes given back: the refused one
	// now fits.
	if r := b.send(t, over); r.status != http.StatusOK {
		t.Fatalf("after the budget freed: %d %s", r.status, r.raw)
	}
}

// A body larger than the whole budget is still taken when nothing else is
// in flight: the budget slows large deliveries, it never refuses them for
// ever.
func TestReceiverMemoryBudgetAdmitsOneLargeBody(t *testing.T) {
	t.Parallel()
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) { o.MaxInFlightBytes = 1 << 10 })
	if r := b.send(t, stripe(stripeBodyOfSize("evt_big", 8<<10))); r.status != http.StatusOK {
		t.Fatalf("a lone large delivery: %d %s", r.status, r.raw)
	}
}

// stalled sends a Stripe delivery's headers with a Content-Length of
// length, then sent bytes of its body, and then nothing.
func stalled(t *testing.T, b *bundle, length, sent int) net.Conn {
	t.Helper()
	return testhttp.PartialPost(t, b.srv.Listener.Addr().String(), "/webhooks/stripe", nil, length, strings.Repeat("x", sent))
}

// waitInFlight waits until the receiver holds at least n body bytes.
func waitInFlight(t *testing.T, b *bundle, n int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); b.recv.InFlightBytes() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver holds %d body bytes after a minute, want %d", b.recv.InFlightBytes(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Connections that claim bodies and stall hold only the bytes they sent:
// however many there are, a genuine delivery still fits in the budget.
func TestReceiverStalledBodiesHoldWhatTheySent(t *testing.T) {
	t.Parallel()
	const budget = 16 << 10
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) {
		o.MaxInFlightBytes = budget
		o.BodyTimeout = time.Minute // they stay for the whole test
	})
	// Eight claims of 2 KiB fill the budget by their Content-Length.
	for range 8 {
		stalled(t, b, budget/8, 100)
	}
	waitInFlight(t, b, 8*100)
	if r := b.send(t, stripe(stripeBodyOfSize("evt_genuine", 4<<10))); r.status != http.StatusOK {
		t.Fatalf("a genuine delivery beside stalled ones: %d %s (in flight: %d bytes)", r.status, r.raw, b.recv.InFlightBytes())
	}
}

// A body that stops arriving is answered 408 once BodyTimeout has passed,
// and what it held is given back.
func TestReceiverBodyTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) { o.BodyTimeout = 100 * time.Millisecond })
	status, _, raw := testhttp.ReadResponse(t, stalled(t, b, 1<<10, 10))
	if status != http.StatusRequestTimeout || !strings.Contains(string(raw), `"body_timeout"`) {
		t.Fatalf("stalled body: %d %s, want 408 body_timeout", status, raw)
	}
	if n := b.recv.InFlightBytes(); n != 0 {
		t.Fatalf("%d body bytes still held after the answer", n)
	}
}

// The body's deadline ends with the body: a receipt that waits for the
// store longer than BodyTimeout is still stored and answered 200, not
// withdrawn or timed out.
func TestReceiverBodyTimeoutSparesTheStoreWait(t *testing.T) {
	t.Parallel()
	st := teststore.SQLite(t, nil)
	holding, writing, release := holdingFirst(st)
	const bodyTimeout = 100 * time.Millisecond
	b := setup(t, holding, func(o *ferryhttp.ReceiverOptions) {
		o.ReceiveConcurrency = 1
		o.BodyTimeout = bodyTimeout
	})
	t.Cleanup(release) // before the server's Close, which waits for it
	first := sendFirst(b, writing)
	second := make(chan reply, 1)
	go func() {
		r, _ := b.do(stripe(`{"id":"evt_second"}`).with("X-Test-Case", "second"))
		second <- r
	}()
	for !b.reached("second") {
		time.Sleep(time.Millisecond) // polling interval, not a proof
	}
	time.Sleep(3 * bodyTimeout) // evt_second's body deadline passes while it waits for a batch
	release()
	for name, answered := range map[string]<-chan reply{"evt_first": first, "evt_second": second} {
		if r := <-answered; r.status != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", name, r.status, r.raw)
		}
	}
	if event(t, st, "stripe", "evt_second") == nil {
		t.Fatal("evt_second not stored")
	}
}

// A body whose length is not named is counted as it arrives, and refused
// (503 memory_budget, nothing stored) the moment it stops fitting beside
// what is held.
func TestReceiverMemoryBudgetRefusesPartWay(t *testing.T) {
	t.Parallel()
	b, release, answered := holdFirstBody(t)
	// 12 KiB held + 8 KiB arriving > 16 KiB, found part-way. (Admitted, it
	// would wait behind the held store: the ceiling.)
	refused := make(chan reply, 1)
	go func() {
		r, err := b.do(chunked(stripe(stripeBodyOfSize("evt_chunked", 8<<10))))
		if err != nil {
			t.Error(err)
		}
		refused <- r
	}()
	select {
	case r := <-refused:
		assertUnavailable(t, r, "5", "memory_budget")
	case <-time.After(time.Minute):
		t.Fatal("a chunked body past the budget was not refused: it waits for the store")
	}
	release()
	if r := <-answered; r.status != http.StatusOK {
		t.Fatalf("first delivery: %d %s", r.status, r.raw)
	}
	if ev := event(t, b.store, "stripe", "evt_chunked"); ev != nil {
		t.Fatal("a body refused part-way was stored")
	}
}
