package ferryhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
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
	conn, err := net.Dial("tcp", b.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a ceiling only a body-reading receiver reaches
	var req strings.Builder
	fmt.Fprintf(&req, "POST /webhooks/%s HTTP/1.1\r\nHost: ferry.test\r\nContent-Length: %d\r\n", d.source, len(d.body))
	for k, vs := range d.header {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer without the body: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// Past MaxInFlightBytes the receiver answers 503 + Retry-After before it
// reads a body; once the bodies in flight are stored, the budget is free
// again.
func TestReceiverMemoryBudget(t *testing.T) {
	t.Parallel()
	real := teststore.SQLite(t, nil)
	st := &heldStore{Store: real, entered: make(chan struct{}, 1), release: make(chan struct{})}
	const budget = 16 << 10
	b := setup(t, st, func(o *ferryhttp.ReceiverOptions) { o.MaxInFlightBytes = budget })
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(st.release) }) }
	t.Cleanup(release) // before the server closes: a held request would keep it open

	first := stripe(stripeBodyOfSize("evt_first", 12<<10))
	answered := make(chan reply, 1)
	go func() {
		r, err := b.do(first)
		if err != nil {
			t.Error(err)
		}
		answered <- r
	}()
	select {
	case <-st.entered: // the first body is admitted and held
	case <-time.After(30 * time.Second):
		t.Fatal("the first delivery never reached the store")
	}

	over := stripe(stripeBodyOfSize("evt_over", 8<<10)) // 12 + 8 KiB > 16 KiB
	assertUnavailable(t, headersOnly(t, b, over), "5", "memory_budget")

	release()
	if r := <-answered; r.status != http.StatusOK {
		t.Fatalf("first delivery: %d %s", r.status, r.raw)
	}
	if ev := event(t, real, "stripe", "evt_over"); ev != nil {
		t.Fatal("a refused delivery was stored")
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
