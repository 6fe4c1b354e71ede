package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-inbox/ferry/ferrytest"
)

// runRSS runs `ferry serve` (role all, examples/ferry.toml's defaults) on
// each store twice, a fresh process each time, and reports the peak RSS
// the kernel recorded for it (VmHWM) once the load has been sent and its
// backlog has reached the app: at -rss-rate paced 1 KB deliveries, a load
// the worker keeps up with; and the worst case, 1 MiB bodies (the default
// cap) from -clients connections as fast as they are answered.
func runRSS(ctx context.Context, o *options) (*result, error) {
	stores := []struct {
		name string
		open func(ctx context.Context, run string) (string, func(), error)
	}{
		{"PostgreSQL", func(ctx context.Context, run string) (string, func(), error) {
			s, err := createSchema(ctx, o.url, "rss")
			if err != nil {
				return "", nil, err
			}
			return s.url, s.drop, nil
		}},
		{"SQLite", func(ctx context.Context, run string) (string, func(), error) {
			path := filepath.Join(o.tmp, "rss-"+run+".db")
			return "sqlite:" + path, func() { removeDB(path) }, nil
		}},
	}
	var rows [][]string
	var steadyMB, worstMB float64
	for _, st := range stores {
		steady, err := rssOnce(ctx, o, "steady", st.open, func(target, secret string) ([]string, int, time.Duration) {
			start := time.Now()
			sent, failed := pacedSends(ctx, target, secret, "evt_rss_", o.rssRate, o.rssDur, 256)
			ids := make([]string, 0, len(sent))
			for id := range sent {
				ids = append(ids, id)
			}
			return ids, failed, time.Since(start)
		})
		if err != nil {
			return nil, fmt.Errorf("%s steady: %w", st.name, err)
		}
		worst, err := rssOnce(ctx, o, "worst", st.open, func(target, secret string) ([]string, int, time.Duration) {
			ids, failed, start, end := burst(ctx, target, "evt_rss_big_", o.clients, o.rssWorstDur, func(id string) ([]byte, http.Header) {
				return bigEvent(secret, id, 1<<20)
			})
			return ids, failed, end.Sub(start)
		})
		if err != nil {
			return nil, fmt.Errorf("%s worst case: %w", st.name, err)
		}
		steadyMB, worstMB = max(steadyMB, steady.mb), max(worstMB, worst.mb)
		rows = append(rows,
			[]string{"  " + st.name + " steady", fmt.Sprintf("%.1f MB", steady.mb), fmt.Sprintf("%d/s paced 1 KB deliveries for %s: %s", o.rssRate, o.rssDur, steady.detail)},
			[]string{"  " + st.name + " worst", fmt.Sprintf("%.1f MB", worst.mb), fmt.Sprintf("1 MiB deliveries from %d connections for %s: %s", o.clients, o.rssWorstDur, worst.detail)},
		)
	}
	head := [][]string{
		{"rss_mb", fmt.Sprintf("%.1f", steadyMB), "peak RSS (VmHWM) of ferry serve --role all on examples/ferry.toml, through the drain; the larger of the two stores"},
		{"rss_worst_mb", fmt.Sprintf("%.1f", worstMB), "the same with 1 MiB bodies (the default cap) on many connections"},
	}
	return &result{
		rows: append(head, rows...),
		summary: map[string]string{
			"rss_mb":       fmt.Sprintf("%.1f", steadyMB),
			"rss_worst_mb": fmt.Sprintf("%.1f", worstMB),
		},
	}, nil
}

type rssRun struct {
	mb     float64
	detail string
}

// rssOnce starts a fresh store and `ferry serve`, runs load against it,
// waits for every accepted event to reach the app, and reads VmHWM.
func rssOnce(ctx context.Context, o *options, run string, open func(context.Context, string) (string, func(), error), load func(target, secret string) ([]string, int, time.Duration)) (*rssRun, error) {
	a, err := startApp(0)
	if err != nil {
		return nil, err
	}
	defer a.close()
	storeURL, cleanup, err := open(ctx, run)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	c, target, secret, err := serveExample(ctx, o, "rss-"+run, storeURL, a)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	pid := c.cmd.Process.Pid

	// VmHWM is the kernel's own peak; sampling VmRSS cross-checks it.
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
	ids, failed, took := load(target, secret)
	loadEnd := time.Now()
	during := a.count()
	last, err := a.waitAll(ctx, ids, o.drainMax)
	hwm, herr := procStatusKB(pid, "VmHWM")
	stopSampling()
	<-sampled
	if err != nil {
		return nil, err
	}
	if herr != nil {
		return nil, herr
	}
	detail := fmt.Sprintf("%d answered 2xx (%.0f/s), %d not; %d forwarded during the load (%.0f%%), the last %s after it",
		len(ids), float64(len(ids))/took.Seconds(), failed, during, 100*float64(during)/float64(max(1, len(ids))),
		max(0, last.Sub(loadEnd)).Round(100*time.Millisecond))
	return &rssRun{mb: float64(max(hwm, peakRSS.Load())) / 1024, detail: detail}, nil
}

// bigPad is the padding of the worst case's bodies: random letters, so
// that the store writes what it is sent instead of compressing it. Made
// once: the load generator's CPU goes to sending, not to making bodies.
var bigPad = sync.OnceValue(func() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte('a' + rand.IntN(26))
	}
	return b
})

// bigEvent is a signed Stripe event of size bytes (at most 1 MiB).
func bigEvent(secret, id string, size int) ([]byte, http.Header) {
	head := `{"id":"` + id + `","object":"event","type":"invoice.paid","data":{"object":{"pad":"`
	tail := `"}}}`
	body := make([]byte, 0, size)
	body = append(body, head...)
	body = append(body, bigPad()[:size-len(head)-len(tail)]...)
	body = append(body, tail...)
	return body, ferrytest.SignStripe(secret, body, time.Now())
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
