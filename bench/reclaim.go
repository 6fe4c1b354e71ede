package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// runReclaim kills (SIGKILL) a `ferry serve` worker while it holds the lease
// of an event whose downstream call is still open, and times how long until
// another worker, already running, has the event done. Both run Ferry's
// default settings.
func runReclaim(ctx context.Context, o *options) (*result, error) {
	s, err := createSchema(ctx, o.url, "reclaim")
	if err != nil {
		return nil, err
	}
	defer s.drop()

	gotA := make(chan struct{}, 1)
	var doneByB atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a": // the worker that is about to die: hold the call open
			// Read the body first: only then does the server notice the
			// client's connection closing.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case gotA <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done():
			case <-time.After(2 * ferry.DefaultLeaseTTL): // bounded, whatever happens
			}
		case "/b":
			doneByB.Add(1)
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer down.Close()

	a, err := startServe(ctx, o.tmp, "reclaim-a", configTOML(s.url, down.URL+"/a", "", 0), "all")
	if err != nil {
		return nil, err
	}
	defer a.kill()
	body, header := delivery("evt_reclaim_", 1)
	if status, err := post(ctx, http.DefaultClient, "http://"+a.addr+"/webhooks/stripe", header, body); err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("delivery to worker A: status %d, %v", status, err)
	}
	select {
	case <-gotA:
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("worker A never called the downstream")
	}
	b, err := startServe(ctx, o.tmp, "reclaim-b", configTOML(s.url, down.URL+"/b", "", 0), "worker")
	if err != nil {
		return nil, err
	}
	defer b.stop()

	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var leftSeconds float64
	if err := conn.QueryRow(ctx, "SELECT extract(epoch FROM lease_expires_at - now())::float8 FROM ferry_event WHERE event_id = 'evt_reclaim_1'").Scan(&leftSeconds); err != nil {
		return nil, err
	}
	leaseLeft := time.Duration(leftSeconds * float64(time.Second))

	fmt.Fprintf(os.Stderr, "  reclaim: A holds the lease (%s left); killing it\n", leaseLeft.Round(time.Millisecond))
	killed := time.Now()
	a.kill()
	deadline := time.Now().Add(2 * ferry.DefaultLeaseTTL)
	var state string
	for time.Now().Before(deadline) {
		if err := conn.QueryRow(ctx, "SELECT state FROM ferry_event WHERE event_id = 'evt_reclaim_1' UNION ALL SELECT state FROM ferry_event_done WHERE event_id = 'evt_reclaim_1' LIMIT 1").Scan(&state); err != nil {
			return nil, err
		}
		if state == string(ferry.StateDone) {
			break
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	took := time.Since(killed)
	if state != string(ferry.StateDone) {
		return nil, fmt.Errorf("event still %s %s after the kill", state, took.Round(time.Millisecond))
	}
	if doneByB.Load() == 0 {
		return nil, fmt.Errorf("event done, but not by worker B")
	}
	limit := ferry.DefaultLeaseTTL + time.Second
	return &result{
		rows: [][]string{{"reclaim_ms", fmt.Sprint(took.Milliseconds()),
			fmt.Sprintf("SIGKILL to done by another worker; lease TTL %s (default), %s of it left at the kill; target ≤ %s; River's rescuer default: 1h",
				ferry.DefaultLeaseTTL, leaseLeft.Round(time.Millisecond), limit)}},
		summary: map[string]string{"reclaim_ms": fmt.Sprint(took.Milliseconds())},
	}, nil
}
