package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/postgres"
)

// The write-up's load: 5 events/s held 30 s each is 150 in flight. The
// benchmark keeps the 150 and shortens the run: 50 events/s held 3 s.
const (
	connsRate    = 50
	connsFor     = 20 * time.Second
	connsHold    = 3 * time.Second
	connsWorkers = connsRate * int(connsHold/time.Second) // 150 in flight
)

func runConns(ctx context.Context, o *options) (*result, error) {
	maxConns, err := serverMaxConnections(ctx, o.url)
	if err != nil {
		return nil, err
	}
	// Both designs get the same pool. The server is shared, so the pool may
	// take at most half of max_connections; the tx-held design's requests
	// that cannot get a connection are counted as waiting.
	poolMax := min(connsWorkers, maxConns/2)

	ferryPeak, ferryDone, err := connsFerry(ctx, o, poolMax)
	if err != nil {
		return nil, fmt.Errorf("ferry: %w", err)
	}
	txPeak, txWaitPeak, txDone, err := connsTxHeld(ctx, o, poolMax)
	if err != nil {
		return nil, fmt.Errorf("tx-held: %w", err)
	}
	demand := txPeak + txWaitPeak
	return &result{
		rows: [][]string{
			{"conns_ferry", fmt.Sprint(ferryPeak), fmt.Sprintf("peak PostgreSQL connections in use, %d events/s for %s, downstream %s, %d workers; %d of %d done", connsRate, connsFor, connsHold, connsWorkers, ferryDone, connsRate*int(connsFor/time.Second))},
			{"conns_txheld", fmt.Sprint(demand), fmt.Sprintf("peak %d connections in use (pool limit %d = max_connections/2) + peak %d requests waiting for one (%d in flight at this load); %d of %d done", txPeak, poolMax, txWaitPeak, connsWorkers, txDone, connsRate*int(connsFor/time.Second))},
		},
		summary: map[string]string{"conns_ferry": fmt.Sprint(ferryPeak), "conns_txheld": fmt.Sprint(demand)},
	}, nil
}

// connsFerry receives events at connsRate through the store and works them
// with a handler that takes connsHold, counting the PostgreSQL connections
// in use throughout.
func connsFerry(ctx context.Context, o *options, poolMax int) (peak, done int, err error) {
	s, err := createSchema(ctx, o.url, "conns_ferry")
	if err != nil {
		return 0, 0, err
	}
	defer s.drop()
	const app = "bench_conns_ferry"
	pool, err := s.pool(ctx, app, poolMax)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	store := postgres.New(pool, nil)
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return 0, 0, err
	}
	var handled atomic.Int64
	client, err := ferry.NewClient(&ferry.Config{Store: store, Workers: connsWorkers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, 0, err
	}
	client.Handle("bench", func(ctx context.Context, _ *ferry.Delivery) error {
		select {
		case <-time.After(connsHold): // the slow downstream
		case <-ctx.Done():
			return ctx.Err()
		}
		handled.Add(1)
		return nil
	})
	sampler, err := sampleConns(ctx, o.url, app, 10*time.Millisecond)
	if err != nil {
		return 0, 0, err
	}
	if err := client.Start(ctx); err != nil {
		sampler.finish()
		return 0, 0, err
	}
	rerr := atRate(ctx, connsRate, connsFor, func(ctx context.Context, n int) error {
		_, err := store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "bench", EventID: fmt.Sprint("evt_", n), Type: "bench", Payload: []byte(`{}`)})
		return err
	})
	sleepCtx(ctx, connsHold+time.Second) // let the last events finish
	_ = client.Stop(context.Background())
	peak, serr := sampler.finish()
	fmt.Fprintf(os.Stderr, "  conns ferry: peak %d in use, %d handled\n", peak, handled.Load())
	return peak, int(handled.Load()), errors.Join(rerr, serr)
}

// connsTxHeld is the one-transaction design: each event's claim and its
// work share one transaction, open for as long as the downstream takes.
func connsTxHeld(ctx context.Context, o *options, poolMax int) (peak, waitPeak, done int, err error) {
	s, err := createSchema(ctx, o.url, "conns_txheld")
	if err != nil {
		return 0, 0, 0, err
	}
	defer s.drop()
	const app = "bench_conns_txheld"
	pool, err := s.pool(ctx, app, poolMax)
	if err != nil {
		return 0, 0, 0, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE processed_events (id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return 0, 0, 0, err
	}
	sampler, err := sampleConns(ctx, o.url, app, 10*time.Millisecond)
	if err != nil {
		return 0, 0, 0, err
	}
	var (
		waiting, maxWaiting atomic.Int64
		handled             atomic.Int64
		wg                  sync.WaitGroup
		errMu               sync.Mutex
		firstErr            error
	)
	rerr := atRate(ctx, connsRate, connsFor, func(ctx context.Context, n int) error {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := waiting.Add(1)
			for m := maxWaiting.Load(); w > m && !maxWaiting.CompareAndSwap(m, w); m = maxWaiting.Load() {
			}
			err := txHeldWork(ctx, pool, fmt.Sprint("evt_", n), func() { waiting.Add(-1) })
			if err == nil {
				handled.Add(1)
				return
			}
			errMu.Lock()
			firstErr = cmpErr(firstErr, err)
			errMu.Unlock()
		}()
		return nil
	})
	wg.Wait()
	peak, serr := sampler.finish()
	fmt.Fprintf(os.Stderr, "  conns tx-held: peak %d in use, peak %d waiting, %d handled\n", peak, maxWaiting.Load(), handled.Load())
	return peak, int(maxWaiting.Load()), int(handled.Load()), errors.Join(rerr, serr, firstErr)
}

// txHeldWork claims the event and does its work in one transaction: the
// claim (a permanent marker) rolls back with the work, and the connection
// is held for the whole downstream call. got is called once a connection is
// held.
func txHeldWork(ctx context.Context, pool *pgxpool.Pool, id string, got func()) error {
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
		sleepCtx(ctx, connsHold) // the slow downstream, inside the transaction
		return nil
	})
}

// atRate calls fn rate times a second for dur, on the schedule (each call
// must be quick or start its own goroutine).
func atRate(ctx context.Context, rate int, dur time.Duration, fn func(ctx context.Context, n int) error) error {
	start := time.Now()
	total := rate * int(dur/time.Second)
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
