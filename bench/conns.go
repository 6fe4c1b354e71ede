package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
)

// runConns puts the write-up's load on PostgreSQL two ways at once, on the
// same schedule: events arrive at -conns-rate a second and the downstream
// holds each for -conns-hold (5/s × 30 s: 150 in flight). Ferry is `ferry
// serve` forwarding to an app that holds each call; the one-transaction
// design claims and works each event in one open transaction. Arrivals run
// for the hold (the ramp to full load) plus -conns-steady. Each side's
// connections are counted by application_name.
func runConns(ctx context.Context, o *options) (*result, error) {
	maxConns, err := serverMaxConnections(ctx, o.url)
	if err != nil {
		return nil, err
	}
	needed := int(math.Ceil(float64(o.connsRate) * o.connsHold.Seconds()))
	// The one-transaction design gets the write-up's pool of 50, at most
	// half of max_connections (the server is shared).
	txPool := min(txHeldPool, maxConns/2)
	arrivals := o.connsHold + o.connsSteady

	var (
		wg     sync.WaitGroup
		fr     *connsFerryResult
		tr     *connsTxResult
		fe, te error
	)
	wg.Add(2)
	go func() { defer wg.Done(); fr, fe = connsFerry(ctx, o, needed, arrivals) }()
	go func() { defer wg.Done(); tr, te = connsTxHeld(ctx, o, txPool, arrivals) }()
	wg.Wait()
	if err := errors.Join(fe, te); err != nil {
		return nil, err
	}
	return connsResult(o, needed, txPool, arrivals, fr, tr), nil
}

// connsResult is what runConns reports: the measured peaks of both sides,
// and, apart, what the one-transaction design needs by arithmetic.
func connsResult(o *options, needed, txPool int, arrivals time.Duration, fr *connsFerryResult, tr *connsTxResult) *result {
	offered := int(float64(o.connsRate) * arrivals.Seconds())
	capacity := min(float64(o.connsRate), float64(txPool)/o.connsHold.Seconds())
	return &result{
		rows: [][]string{
			{"conns_ferry", fmt.Sprint(fr.peakInUse), fmt.Sprintf("peak PostgreSQL connections in use (running, in a transaction, or holding LISTEN; pg_stat_activity every 10ms) of ferry serve: %d events/s for %s, downstream holds each %s, %d workers; peak %d in flight at the app; lease TTL %s, heartbeat %s: %d leases seen extended past their first TTL, %d events claimed more than once; %d of %d done",
				o.connsRate, arrivals, o.connsHold, needed, fr.peakInFlight, fr.ttl, fr.ttl/3, fr.extended, fr.retried, fr.done, fr.sent)},
			{"conns_ferry_open", fmt.Sprint(fr.peakOpen), "peak PostgreSQL connections open (idle included) of the same process: its pool as `ferry serve` sizes it"},
			{"conns_txheld_in_use", fmt.Sprint(tr.peakInUse), fmt.Sprintf("the one-transaction design, run beside Ferry on the same schedule on the write-up's pool of %d: peak PostgreSQL connections in use (pg_stat_activity every 10ms), each held for the whole downstream call", txPool)},
			{"conns_txheld_waiting", fmt.Sprint(tr.peakWaiting), fmt.Sprintf("peak requests of the same side waiting for a connection (counted in the bench); in use + waiting = %d connections wanted at the peak; %d of %d events done before the waiting ones were given up (a hold after the last arrival)",
				tr.peakInUse+tr.peakWaiting, tr.done, offered)},
			{"  needed (computed)", fmt.Sprint(needed), fmt.Sprintf("not measured: rate × hold = %d/s × %s, one connection per event in flight; a pool of %d completes at most %d / %s = %.2f events/s, %.0f%% of the %d/s offered",
				o.connsRate, o.connsHold, txPool, txPool, o.connsHold, capacity, 100*capacity/float64(o.connsRate), o.connsRate)},
		},
		summary: map[string]string{
			"conns_ferry":          fmt.Sprint(fr.peakInUse),
			"conns_ferry_open":     fmt.Sprint(fr.peakOpen),
			"conns_txheld_in_use":  fmt.Sprint(tr.peakInUse),
			"conns_txheld_waiting": fmt.Sprint(tr.peakWaiting),
		},
	}
}

// txHeldPool is the pool the write-up gives the one-transaction design.
const txHeldPool = 50

type connsFerryResult struct {
	peakInUse, peakOpen, peakInFlight int
	ttl                               time.Duration
	extended, retried                 int
	sent, done                        int
}

// connsFerry runs `ferry serve` with workers workers, a forward timeout past
// the hold, and a lease TTL short enough that heartbeats run during the hold
// (interval TTL/3; Ferry's default TTL unless the hold is shorter).
func connsFerry(ctx context.Context, o *options, workers int, arrivals time.Duration) (*connsFerryResult, error) {
	s, err := createSchema(ctx, o.url, "conns_ferry")
	if err != nil {
		return nil, err
	}
	defer s.drop()
	const appName = "bench_conns_ferry"
	storeURL, err := withParams(s.url, map[string]string{"application_name": appName})
	if err != nil {
		return nil, err
	}
	a, err := startApp(o.connsHold)
	if err != nil {
		return nil, err
	}
	defer a.close()
	r := &connsFerryResult{ttl: min(ferry.DefaultLeaseTTL, o.connsHold)}
	worker := fmt.Sprintf("workers = %d\nlease_ttl = %q\n", workers, r.ttl.String())
	cfg := configTOML(storeURL, "http://"+a.addr+"/webhooks/stripe", worker, o.connsHold+30*time.Second)
	c, err := startServe(ctx, o.tmp, "conns", cfg, "all")
	if err != nil {
		return nil, err
	}
	defer c.stop()

	sampler, err := sampleConns(ctx, o.url, appName, 10*time.Millisecond)
	if err != nil {
		return nil, err
	}
	inFlight := make(chan int, 1)
	go func() { // the app's peak concurrency, on the same schedule
		peak := 0
		for sleepCtx(sampler.ctx, 10*time.Millisecond) {
			a.mu.Lock()
			peak = max(peak, a.inFlight)
			a.mu.Unlock()
		}
		inFlight <- peak
	}()
	sent, failed := pacedSends(ctx, "http://"+c.addr+"/webhooks/stripe", stripeSecret, "evt_conns_", o.connsRate, arrivals, 64)
	r.sent = len(sent)

	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		sampler.finish()
		return nil, err
	}
	defer conn.Close(context.Background())
	// The oldest events in flight have been held for most of the hold: a
	// lease that lasts past claim + TTL was extended by a heartbeat.
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM ferry_event
		WHERE state = 'in_progress' AND lease_expires_at > claimed_at + make_interval(secs => $1) + interval '100 ms'`,
		r.ttl.Seconds()).Scan(&r.extended); err != nil {
		sampler.finish()
		return nil, err
	}
	deadline := time.Now().Add(o.connsHold + 30*time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM ferry_event_done").Scan(&r.done); err != nil {
			break
		}
		if r.done >= r.sent {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	peaks, serr := sampler.finish()
	r.peakInUse, r.peakOpen, r.peakInFlight = peaks.inUse, peaks.open, <-inFlight
	if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM ferry_event WHERE attempt > 1) + (SELECT count(*) FROM ferry_event_done WHERE attempt > 1)").Scan(&r.retried); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "  conns ferry: peak %d in use, %d open, %d in flight; %d extended by heartbeats; %d of %d done, %d non-2xx\n",
		r.peakInUse, r.peakOpen, r.peakInFlight, r.extended, r.done, r.sent, failed)
	if r.done < r.sent {
		return nil, errors.Join(serr, fmt.Errorf("ferry: %d of %d events done %s after the last arrival", r.done, r.sent, o.connsHold+30*time.Second))
	}
	return r, serr
}

type connsTxResult struct {
	peakInUse, peakWaiting, done int
}

// connsTxHeld is the one-transaction design: each event's claim and its
// work share one transaction, open for as long as the downstream takes.
// Arrivals stop after arrivals; requests still waiting for a connection a
// hold later are abandoned (the queue would take minutes to drain).
func connsTxHeld(ctx context.Context, o *options, poolMax int, arrivals time.Duration) (*connsTxResult, error) {
	const appName = "bench_conns_txheld"
	_, pool, release, err := createSchemaPool(ctx, o.url, "conns_txheld", poolMax)
	if err != nil {
		return nil, err
	}
	defer release()
	if _, err := pool.Exec(ctx, "CREATE TABLE processed_events (id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return nil, err
	}
	sampler, err := sampleConns(ctx, o.url, appName, 10*time.Millisecond)
	if err != nil {
		return nil, err
	}
	workCtx, abandon := context.WithCancel(ctx)
	defer abandon()
	var (
		waiting, maxWaiting atomic.Int64
		wg                  sync.WaitGroup
		mu                  sync.Mutex
		finished            int
		firstErr            error
	)
	rerr := atRate(ctx, o.connsRate, arrivals, func(_ context.Context, n int) error {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := waiting.Add(1)
			for m := maxWaiting.Load(); w > m && !maxWaiting.CompareAndSwap(m, w); m = maxWaiting.Load() {
			}
			err := txHeldWork(workCtx, pool, o.connsHold, fmt.Sprint("evt_", n), func() { waiting.Add(-1) })
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				finished++
			case workCtx.Err() != nil: // abandoned
			default:
				firstErr = cmpErr(firstErr, err)
			}
		}()
		return nil
	})
	sleepCtx(ctx, o.connsHold+time.Second) // those holding a connection finish
	abandon()
	wg.Wait()
	peaks, serr := sampler.finish()
	r := &connsTxResult{peakInUse: peaks.inUse, peakWaiting: int(maxWaiting.Load()), done: finished}
	fmt.Fprintf(os.Stderr, "  conns tx-held: peak %d in use, peak %d waiting, %d done\n", r.peakInUse, r.peakWaiting, r.done)
	return r, errors.Join(rerr, serr, firstErr)
}

// txHeldWork claims the event and does its work in one transaction: the
// claim (a permanent marker) rolls back with the work, and the connection
// is held for the whole downstream call. got is called once a connection is
// held.
func txHeldWork(ctx context.Context, pool *pgxpool.Pool, hold time.Duration, id string, got func()) error {
	conn, err := pool.Acquire(ctx)
	got()
	if err != nil {
		return err
	}
	defer conn.Release()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO processed_events (id) VALUES ($1) ON CONFLICT DO NOTHING", id)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if !sleepCtx(ctx, hold) { // the slow downstream, inside the transaction
			return ctx.Err()
		}
		return nil
	})
}

// atRate calls fn rate times a second for dur, on the schedule (each call
// must be quick or start its own goroutine).
func atRate(ctx context.Context, rate int, dur time.Duration, fn func(ctx context.Context, n int) error) error {
	start := time.Now()
	total := int(float64(rate) * dur.Seconds())
	interval := time.Second / time.Duration(rate)
	for n := range total {
		if !sleepCtx(ctx, time.Until(start.Add(time.Duration(n)*interval))) {
			return ctx.Err()
		}
		if err := fn(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
