package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The e2e benchmarks run what a new user runs: the `ferry serve` binary on
// examples/ferry.toml (store.url and http.listen changed, nothing else),
// forwarding to a local app that answers 200 at once. Each round runs a
// burst and its drain, then a paced run, each on a fresh store and process.

func runE2EPG(ctx context.Context, o *options) (*result, error) {
	return runE2E(ctx, o, "e2e_pg", "PostgreSQL", func(ctx context.Context, _ int) (string, func(), error) {
		s, err := createSchema(ctx, o.url, "e2e")
		if err != nil {
			return "", nil, err
		}
		// Flush what earlier phases and benchmarks wrote, so that this
		// phase does not pay for their checkpoint (pgbench does the same).
		if err := adminExec(ctx, o.url, "CHECKPOINT"); err != nil {
			s.drop()
			return "", nil, err
		}
		u, err := withParams(s.url, map[string]string{"application_name": "bench_e2e_ferry"})
		if err != nil {
			s.drop()
			return "", nil, err
		}
		return u, s.drop, nil
	})
}

func runE2ESQLite(ctx context.Context, o *options) (*result, error) {
	return runE2E(ctx, o, "e2e_sqlite", "SQLite", func(ctx context.Context, run int) (string, func(), error) {
		path := filepath.Join(o.tmp, fmt.Sprintf("e2e-%d.db", run))
		return "sqlite:" + path, func() { removeDB(path) }, nil
	})
}

// e2eRound is what one round measured.
type e2eRound struct {
	accepted, failed int             // burst deliveries answered 2xx, and not
	burst            time.Duration   // first send to last answer
	forwarded        int             // burst events that reached the app within the burst
	drain            time.Duration   // end of the burst → its last event at the app
	paced            []time.Duration // sent after the warm-up
	warm             []time.Duration // sent during it
	pacedFailed      int
	repeats          int // forwards of an event the app already had
}

func (r *e2eRound) receivedPerS() float64  { return float64(r.accepted) / r.burst.Seconds() }
func (r *e2eRound) forwardedPerS() float64 { return float64(r.forwarded) / r.burst.Seconds() }
func (r *e2eRound) burstX() float64        { return r.forwardedPerS() / r.receivedPerS() }

func runE2E(ctx context.Context, o *options, name, storeName string, newStore func(ctx context.Context, round int) (string, func(), error)) (*result, error) {
	var rounds []*e2eRound
	var appAddr string
	for round := range o.rounds {
		r, addr, err := e2eOnce(ctx, o, name, round, newStore)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", round+1, err)
		}
		appAddr = addr
		rounds = append(rounds, r)
		fmt.Fprintf(os.Stderr, "  %s round %d: received %.0f/s, forwarded %.0f/s during the burst (x %.2f), drain %s; paced p50 %s p99 %s max %s, warm-up max %s\n",
			name, round+1, r.receivedPerS(), r.forwardedPerS(), r.burstX(), r.drain.Round(time.Millisecond),
			ms(percentile(r.paced, 0.5)), ms(percentile(r.paced, 0.99)), ms(percentile(r.paced, 1)), ms(percentile(r.warm, 1)))
	}
	var xs, recv, fwd, drain, p50, p99, pmax, wmax []float64
	accepted, failed, pacedN, warmN, pacedFailed, repeats := 0, 0, 0, 0, 0, 0
	for _, r := range rounds {
		xs = append(xs, r.burstX())
		recv, fwd = append(recv, r.receivedPerS()), append(fwd, r.forwardedPerS())
		drain = append(drain, r.drain.Seconds())
		p50 = append(p50, msf(percentile(r.paced, 0.5)))
		p99 = append(p99, msf(percentile(r.paced, 0.99)))
		pmax = append(pmax, msf(percentile(r.paced, 1)))
		wmax = append(wmax, msf(percentile(r.warm, 1)))
		accepted, failed, repeats = accepted+r.accepted, failed+r.failed, repeats+r.repeats
		pacedN, warmN, pacedFailed = pacedN+len(r.paced), warmN+len(r.warm), pacedFailed+r.pacedFailed
	}
	x, p99ms := median(xs), median(p99)
	forward := "forward URLs as in the example"
	if appAddr != exampleAppAddr {
		forward = fmt.Sprintf("forward URLs pointed at the app, %s (%s was taken)", appAddr, exampleAppAddr)
	}
	return &result{
		rows: [][]string{
			{name + "_burst_x", fmt.Sprintf("%.2f", x), fmt.Sprintf("forwarded/s during the burst ÷ received/s; median of %d rounds %s", o.rounds, fmtFloats(xs))},
			{"  received", fmt.Sprintf("%.0f/s", median(recv)), fmt.Sprintf("signed 1 KB Stripe deliveries answered 2xx, %d senders (closed loop) for %s; %d accepted, %d not, over all rounds", o.clients, o.e2eBurst, accepted, failed)},
			{"  forwarded during the burst", fmt.Sprintf("%.0f/s", median(fwd)), "burst events that reached the app between the first send and the last answer"},
			{"  drain", fmt.Sprintf("%.1fs", median(drain)), "end of the burst → its last event at the app"},
			{name + "_p99_ms", fmt.Sprintf("%.1f", p99ms), fmt.Sprintf("paced %d/s for %s, send → arrival at the app: p50 %.1fms, p99 %.1fms, max %.1fms (medians of %d rounds); %d events, %d non-2xx",
				o.e2eRate, o.e2ePaced, median(p50), p99ms, median(pmax), o.rounds, pacedN, pacedFailed)},
			{"  warm-up", fmt.Sprintf("%.1fms", median(wmax)), fmt.Sprintf("max of the %d events sent in the first %s after ferry serve was up (its first connections and statements), not counted above", warmN, o.e2eWarmup)},
			{"  setup", "", fmt.Sprintf("ferry serve (role all) on examples/ferry.toml with store.url (%s) and http.listen changed, %s; the app answers 200 at once (HTTP/1.1 and h2c); %d repeated forwards", storeName, forward, repeats)},
		},
		summary: map[string]string{
			name + "_burst_x": fmt.Sprintf("%.2f", x),
			name + "_p99_ms":  fmt.Sprintf("%.1f", p99ms),
		},
	}, nil
}

func e2eOnce(ctx context.Context, o *options, name string, round int, newStore func(ctx context.Context, round int) (string, func(), error)) (*e2eRound, string, error) {
	r := &e2eRound{}
	prefix := fmt.Sprintf("evt_%s_r%d_", name, round)
	// The burst and the paced run each get a fresh store and process, so
	// neither measures what the other left behind.
	addr, err := withExample(ctx, o, fmt.Sprintf("%s-%d-burst", name, round), 2*round, newStore, func(a *app, target, secret string) error {
		ids, failed, start, end := burst(ctx, target, prefix+"b", o.clients, o.e2eBurst, func(id string) ([]byte, http.Header) {
			return signedEvent(secret, id, payloadSize)
		})
		if len(ids) == 0 {
			return fmt.Errorf("no burst delivery was accepted (%d failed)", failed)
		}
		r.accepted, r.failed, r.burst = len(ids), failed, end.Sub(start)
		for _, id := range ids {
			if t, ok := a.arrivedAt(id); ok && !t.After(end) {
				r.forwarded++
			}
		}
		last, err := a.waitAll(ctx, ids, o.drainMax)
		if err != nil {
			return fmt.Errorf("burst drain: %w", err)
		}
		r.drain = max(0, last.Sub(end))
		r.repeats += a.repeatCount()
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	_, err = withExample(ctx, o, fmt.Sprintf("%s-%d-paced", name, round), 2*round+1, newStore, func(a *app, target, secret string) error {
		start := time.Now()
		sent, failed := pacedSends(ctx, target, secret, prefix+"p", o.e2eRate, o.e2eWarmup+o.e2ePaced, 256)
		r.pacedFailed = failed
		ids := make([]string, 0, len(sent))
		for id := range sent {
			ids = append(ids, id)
		}
		if _, err := a.waitAll(ctx, ids, o.drainMax); err != nil {
			return fmt.Errorf("paced run: %w", err)
		}
		warmEnd := start.Add(o.e2eWarmup)
		for id, t := range sent {
			at, _ := a.arrivedAt(id)
			if t.Before(warmEnd) {
				r.warm = append(r.warm, at.Sub(t))
			} else {
				r.paced = append(r.paced, at.Sub(t))
			}
		}
		r.repeats += a.repeatCount()
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return r, addr, nil
}

// withExample runs fn against a fresh store (the run-th) and `ferry serve` on
// the example config, forwarding to a fresh app, and tears them down. It
// returns the app's address.
func withExample(ctx context.Context, o *options, name string, run int, newStore func(ctx context.Context, run int) (string, func(), error), fn func(a *app, target, secret string) error) (string, error) {
	a, err := startApp(0)
	if err != nil {
		return "", err
	}
	defer a.close()
	storeURL, cleanup, err := newStore(ctx, run)
	if err != nil {
		return "", err
	}
	defer cleanup()
	c, target, secret, err := serveExample(ctx, o, name, storeURL, a)
	if err != nil {
		return "", err
	}
	defer c.stop()
	return a.addr, fn(a, target, secret)
}

// burst runs senders connections, each sending its next signed delivery as
// soon as the last was answered, until dur has passed; the burst ends when
// the last answer is in. event makes the delivery of an id. It returns the
// ids answered 2xx.
func burst(ctx context.Context, target, prefix string, senders int, dur time.Duration, event func(id string) ([]byte, http.Header)) (ids []string, failed int, start, end time.Time) {
	hc := senderClient(senders)
	defer hc.CloseIdleConnections()
	var (
		seq atomic.Int64
		mu  sync.Mutex
		wg  sync.WaitGroup
	)
	start = time.Now()
	deadline := start.Add(dur)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			bad := 0
			for ctx.Err() == nil && time.Now().Before(deadline) {
				id := prefix + strconv.FormatInt(seq.Add(1), 10)
				body, header := event(id)
				if status, err := post(ctx, hc, target, header, body); err == nil && status/100 == 2 {
					mine = append(mine, id)
				} else {
					bad++
				}
			}
			mu.Lock()
			ids, failed = append(ids, mine...), failed+bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ids, failed, start, time.Now()
}

// pacedSends sends rate signed deliveries a second for dur (open loop: each
// on its own goroutine, at most inflight at once) and returns the send time
// of each one answered 2xx, and how many were not.
func pacedSends(ctx context.Context, target, secret, prefix string, rate int, dur time.Duration, inflight int) (map[string]time.Time, int) {
	hc := senderClient(inflight)
	defer hc.CloseIdleConnections()
	var (
		mu     sync.Mutex
		sent   = map[string]time.Time{}
		failed int
		wg     sync.WaitGroup
	)
	sem := make(chan struct{}, inflight)
	start := time.Now()
	total := int64(float64(rate) * dur.Seconds())
	interval := time.Second / time.Duration(rate)
	for n := int64(0); n < total && ctx.Err() == nil; n++ {
		if !sleepCtx(ctx, time.Until(start.Add(time.Duration(n)*interval))) {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id := prefix + strconv.FormatInt(n, 10)
			body, header := signedEvent(secret, id, payloadSize)
			at := time.Now()
			status, err := post(ctx, hc, target, header, body)
			mu.Lock()
			if err == nil && status/100 == 2 {
				sent[id] = at
			} else {
				failed++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return sent, failed
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
