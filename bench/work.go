package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/postgres"
)

// workSide is a queue under test: seed stores n events, not timed; work
// starts the workers on them, measures the steady rate of committed
// completions, and stops the workers.
type workSide struct {
	name string
	seed func(ctx context.Context, n int) error
	work func(ctx context.Context) (float64, error)
}

func runWork(ctx context.Context, o *options) (*result, error) {
	sFerry, err := createSchema(ctx, o.url, "work_ferry")
	if err != nil {
		return nil, err
	}
	defer sFerry.drop()
	sRiver, err := createSchema(ctx, o.url, "work_river")
	if err != nil {
		return nil, err
	}
	defer sRiver.drop()

	ferryPool, err := sFerry.pool(ctx, "bench_work_ferry", o.poolSize)
	if err != nil {
		return nil, err
	}
	defer ferryPool.Close()
	riverPool, err := sRiver.pool(ctx, "bench_work_river", o.poolSize)
	if err != nil {
		return nil, err
	}
	defer riverPool.Close()

	fs, err := ferryWorkSide(ctx, ferryPool, o.workers)
	if err != nil {
		return nil, err
	}
	rs, err := riverWorkSide(ctx, riverPool, o.workers)
	if err != nil {
		return nil, err
	}

	var ferryRate, riverRate, ratios []float64
	for round := range o.rounds {
		var rate [2]float64
		for i, side := range []workSide{fs, rs} {
			if err := side.seed(ctx, o.workEvents); err != nil {
				return nil, fmt.Errorf("%s seed: %w", side.name, err)
			}
			r, err := side.work(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", side.name, round+1, err)
			}
			if r*(workWarmup+workWindow).Seconds() > 0.9*float64(o.workEvents) {
				return nil, fmt.Errorf("%s worked %.0f events/s: the %d stored events nearly ran out within the run; raise -work-events", side.name, r, o.workEvents)
			}
			rate[i] = r
			fmt.Fprintf(os.Stderr, "  work round %d: %s: %.0f events/s\n", round+1, side.name, rate[i])
		}
		ferryRate, riverRate = append(ferryRate, rate[0]), append(riverRate, rate[1])
		ratios = append(ratios, rate[0]/rate[1])
	}
	x := median(ratios)
	return &result{
		rows: [][]string{
			{"work_pg_x_river", fmt.Sprintf("%.2f", x), fmt.Sprintf("median of %d rounds of per-round ratios %s", o.rounds, fmtFloats(ratios))},
			{"  " + fs.name, fmt.Sprintf("%.0f events/s", median(ferryRate)), fmt.Sprintf("%d stored events, %d workers, no-op handler, pool %d; done rate over %s after %s", o.workEvents, o.workers, o.poolSize, workWindow, workWarmup)},
			{"  " + rs.name, fmt.Sprintf("%.0f events/s", median(riverRate)), fmt.Sprintf("%d stored jobs, MaxWorkers %d, River defaults otherwise, pool %d", o.workEvents, o.workers, o.poolSize)},
		},
		summary: map[string]string{"work_pg_x_river": fmt.Sprintf("%.2f", x)},
	}, nil
}

func ferryWorkSide(ctx context.Context, pool *pgxpool.Pool, workers int) (workSide, error) {
	store := postgres.New(pool, nil)
	if err := store.Migrate(ctx); err != nil {
		return workSide{}, err
	}
	return workSide{
		name: "ferry",
		seed: func(ctx context.Context, n int) error {
			_, err := pool.Exec(ctx, `
				TRUNCATE ferry_event, ferry_attempt, ferry_conflict;
				INSERT INTO ferry_event (source, event_id, type, payload, payload_sha256, next_attempt_at, first_delivered_at, last_delivered_at)
				SELECT 'bench', 'evt_' || i, 'bench', convert_to('{"n":' || i || '}', 'UTF8'), sha256(convert_to('{"n":' || i || '}', 'UTF8')), now(), now(), now()
				FROM generate_series(1, `+fmt.Sprint(n)+`) i;
				ANALYZE ferry_event;`)
			return err
		},
		work: func(ctx context.Context) (float64, error) {
			client, err := ferry.NewClient(&ferry.Config{
				Store: store, Workers: workers, Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				return 0, err
			}
			client.Handle("bench", func(context.Context, *ferry.Delivery) error { return nil })
			if err := client.Start(ctx); err != nil {
				return 0, err
			}
			rate, err := measureDone(ctx, pool, "SELECT count(*) FROM ferry_event WHERE state = 'done'")
			_ = client.Stop(context.Background())
			return rate, err
		},
	}, nil
}

// benchArgs is River's job: the same no-op as Ferry's handler.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

func riverWorkSide(ctx context.Context, pool *pgxpool.Pool, workers int) (workSide, error) {
	driver := riverpgxv5.New(pool)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return workSide{}, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return workSide{}, fmt.Errorf("river migrate: %w", err)
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[benchArgs]) error { return nil }))
	newClient := func() (*river.Client[pgx.Tx], error) {
		return river.NewClient(driver, &river.Config{
			Logger:  quiet,
			Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
			Workers: ws,
		})
	}
	return workSide{
		name: "river " + "v0.51.2",
		seed: func(ctx context.Context, n int) error {
			if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
				return err
			}
			inserter, err := newClient()
			if err != nil {
				return err
			}
			const chunk = 10_000
			for i := 0; i < n; i += chunk {
				params := make([]river.InsertManyParams, 0, chunk)
				for j := i; j < min(n, i+chunk); j++ {
					params = append(params, river.InsertManyParams{Args: benchArgs{N: j}})
				}
				if _, err := inserter.InsertManyFast(ctx, params); err != nil {
					return err
				}
			}
			_, err = pool.Exec(ctx, "ANALYZE river_job")
			return err
		},
		work: func(ctx context.Context) (float64, error) {
			client, err := newClient()
			if err != nil {
				return 0, err
			}
			if err := client.Start(ctx); err != nil {
				return 0, err
			}
			rate, err := measureDone(ctx, pool, "SELECT count(*) FROM river_job WHERE state = 'completed'")
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = client.Stop(stopCtx)
			return rate, err
		},
	}, nil
}

// workWindow measures a worker's steady rate: after workWarmup from the
// start, the done count is read twice, workWindow apart, from the database
// (so a completion counts only once it is committed).
// Short enough that Ferry's rate (about 9,000 events/s here) does not drain
// the 100,000 stored events within it: the run fails rather than report a
// rate measured on an emptying queue.
const (
	workWarmup = 1 * time.Second
	workWindow = 4 * time.Second
)

// measureDone reads the committed done count after workWarmup and again
// after workWindow, and returns the rate between the two.
func measureDone(ctx context.Context, pool *pgxpool.Pool, doneSQL string) (float64, error) {
	count := func() (int64, time.Time, error) {
		before := time.Now()
		var n int64
		err := pool.QueryRow(ctx, doneSQL).Scan(&n)
		// The count is as of some instant during the query: take its middle.
		return n, before.Add(time.Since(before) / 2), err
	}
	if !sleepCtx(ctx, workWarmup) {
		return 0, ctx.Err()
	}
	n1, t1, err := count()
	if err != nil {
		return 0, err
	}
	if !sleepCtx(ctx, workWindow) {
		return 0, ctx.Err()
	}
	n2, t2, err := count()
	if err != nil {
		return 0, err
	}
	return float64(n2-n1) / t2.Sub(t1).Seconds(), nil
}
