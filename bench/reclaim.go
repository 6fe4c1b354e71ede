package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

	a, err := startServe(ctx, o.tmp, "reclaim-a", configTOML(s.url, down.URL+"/a"), "all")
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
	b, err := startServe(ctx, o.tmp, "reclaim-b", configTOML(s.url, down.URL+"/b"), "worker")
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
		if err := conn.QueryRow(ctx, "SELECT state FROM ferry_event WHERE event_id = 'evt_reclaim_1'").Scan(&state); err != nil {
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

// runRSS runs `ferry serve` (role all, the embedded SQLite store, Ferry's
// defaults) under rssRate deliveries a second for rssFor, forwarding each to
// a downstream that answers at once, and reports the peak RSS the kernel
// recorded for it (VmHWM).
func runRSS(ctx context.Context, o *options) (*result, error) {
	const (
		rssRate = 1000
		rssFor  = 20 * time.Second
	)
	var forwarded atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer down.Close()
	dbPath := filepath.Join(o.tmp, "rss.db")
	defer removeDB(dbPath)
	c, err := startServe(ctx, o.tmp, "rss", configTOML("sqlite:"+dbPath, down.URL), "all")
	if err != nil {
		return nil, err
	}
	defer c.stop()
	pid := c.cmd.Process.Pid

	sampleCtx, stopSampling := context.WithCancel(ctx)
	var peakRSS atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sleepCtx(sampleCtx, 100*time.Millisecond) {
			if kb, err := procStatusKB(pid, "VmRSS"); err == nil && kb > peakRSS.Load() {
				peakRSS.Store(kb)
			}
		}
	}()
	start := time.Now()
	ok, failed := paced(ctx, "http://"+c.addr+"/webhooks/stripe", "evt_rss_", rssRate, rssFor, 256)
	took := time.Since(start)
	hwm, err := procStatusKB(pid, "VmHWM")
	stopSampling()
	<-sampled
	if err != nil {
		return nil, err
	}
	mb := float64(max(hwm, peakRSS.Load())) / 1024
	return &result{
		rows: [][]string{{"rss_mb", fmt.Sprintf("%.1f", mb),
			fmt.Sprintf("peak RSS (VmHWM) of ferry serve --role all on SQLite: %d deliveries answered 2xx (%.0f/s), %d not, %d forwarded during the run",
				ok, float64(ok)/took.Seconds(), failed, forwarded.Load())}},
		summary: map[string]string{"rss_mb": fmt.Sprintf("%.1f", mb)},
	}, nil
}

// procStatusKB reads one "Key: N kB" line of /proc/PID/status.
func procStatusKB(pid int, key string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", key, pid)
}
