package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/postgres"
)

// workRun is one configuration of one queue: seed stores n events of 1 KB,
// not timed; work starts the workers on them, measures the steady rate of
// committed completions, and stops the workers. settings says how it runs.
type workRun struct {
	name     string
	settings string
	seed     func(ctx context.Context, n int) error
	work     func(ctx context.Context, window time.Duration) (float64, error)
}

// workPad makes each payload about 1 KB, as a webhook's is.
var workPad = strings.Repeat("x", 1000)

func runWork(ctx context.Context, o *options) (*result, error) {
	// The bench's own pools seed and count; each run's workers use the pool
	// its settings name.
	sFerry, ferryPool, releaseFerry, err := createSchemaPool(ctx, o.url, "work_ferry", o.poolSize)
	if err != nil {
		return nil, err
	}
	defer releaseFerry()
	sRiver, riverPool, releaseRiver, err := createSchemaPool(ctx, o.url, "work_river", o.poolSize)
	if err != nil {
		return nil, err
	}
	defer releaseRiver()
	if err := postgres.New(ferryPool, nil).Migrate(ctx); err != nil {
		return nil, err
	}
	if err := riverMigrate(ctx, riverPool); err != nil {
		return nil, err
	}

	once := func(run workRun) (float64, error) {
		if err := run.seed(ctx, o.workEvents); err != nil {
			return 0, fmt.Errorf("%s seed: %w", run.name, err)
		}
		// Flush the seed and what the run before wrote, so that neither side
		// pays for the other's checkpoint.
		if err := adminExec(ctx, o.url, "CHECKPOINT"); err != nil {
			return 0, err
		}
		r, err := run.work(ctx, o.workWindow)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", run.name, err)
		}
		if r*(workWarmup+o.workWindow).Seconds() > 0.9*float64(o.workEvents) {
			return 0, fmt.Errorf("%s worked %.0f events/s: the %d stored events nearly ran out within the run; raise -work-events", run.name, r, o.workEvents)
		}
		fmt.Fprintf(os.Stderr, "  work: %s (%s): %.0f events/s\n", run.name, run.settings, r)
		return r, nil
	}

	// Each side's best: one run per worker count, alternating sides.
	bestF, bestR := ferryBest(ferryPool, o, o.workSweep[0]), riverBest(riverPool, o, o.workSweep[0])
	var bestFRate, bestRRate float64
	var sweepF, sweepR []string
	for i, w := range o.workSweep {
		runs := []workRun{ferryBest(ferryPool, o, w), riverBest(riverPool, o, w)}
		if i%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, run := range runs {
			r, err := once(run)
			if err != nil {
				return nil, fmt.Errorf("sweep: %w", err)
			}
			if run.name == "ferry" {
				sweepF = append(sweepF, fmt.Sprintf("%d: %.0f", w, r))
				if r > bestFRate {
					bestF, bestFRate = run, r
				}
			} else {
				sweepR = append(sweepR, fmt.Sprintf("%d: %.0f", w, r))
				if r > bestRRate {
					bestR, bestRRate = run, r
				}
			}
		}
	}

	best, err := workPair(o, once, bestF, bestR)
	if err != nil {
		return nil, fmt.Errorf("best: %w", err)
	}
	defF, defR := ferryDefault(sFerry, ferryPool), riverDefault(sRiver, riverPool)
	def, err := workPair(o, once, defF, defR)
	if err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	bx, dx := median(best.ratios), median(def.ratios)
	return &result{
		rows: [][]string{
			{"work_pg_x_river_best", fmt.Sprintf("%.2f", bx), fmt.Sprintf("Ferry best ÷ River best, events worked/s, 1 KB payloads, no-op handler; median of %d rounds %s", o.rounds, fmtFloats(best.ratios))},
			{"  ferry best", fmt.Sprintf("%.0f events/s", median(best.a)), bestF.settings + "; sweep (workers: events/s) " + strings.Join(sweepF, ", ")},
			{"  river best", fmt.Sprintf("%.0f events/s", median(best.b)), bestR.settings + "; sweep " + strings.Join(sweepR, ", ")},
			{"work_pg_x_river_default", fmt.Sprintf("%.2f", dx), fmt.Sprintf("both on their defaults; median of %d rounds %s", o.rounds, fmtFloats(def.ratios))},
			{"  ferry default", fmt.Sprintf("%.0f events/s", median(def.a)), defF.settings},
			{"  river default", fmt.Sprintf("%.0f events/s", median(def.b)), defR.settings},
			{"  method", "", fmt.Sprintf("%d events stored before each run; committed done count read %s after start and again %s later", o.workEvents, workWarmup, o.workWindow)},
		},
		summary: map[string]string{
			"work_pg_x_river_best":    fmt.Sprintf("%.2f", bx),
			"work_pg_x_river_default": fmt.Sprintf("%.2f", dx),
		},
	}, nil
}

type pairRates struct{ a, b, ratios []float64 }

// workPair runs a and b o.rounds times, A B then B A, and keeps each
// round's rates and a ÷ b.
func workPair(o *options, once func(workRun) (float64, error), a, b workRun) (*pairRates, error) {
	p := &pairRates{}
	for round := range o.rounds {
		runs := []workRun{a, b}
		if round%2 == 1 {
			runs[0], runs[1] = b, a
		}
		rate := map[string]float64{}
		for _, run := range runs {
			r, err := once(run)
			if err != nil {
				return nil, fmt.Errorf("round %d: %w", round+1, err)
			}
			rate[run.name] = r
		}
		p.a, p.b = append(p.a, rate[a.name]), append(p.b, rate[b.name])
		p.ratios = append(p.ratios, rate[a.name]/rate[b.name])
	}
	return p, nil
}

func ferrySeed(pool *pgxpool.Pool) func(ctx context.Context, n int) error {
	return func(ctx context.Context, n int) error {
		_, err := pool.Exec(ctx, ferryEmptySQL+`;
			INSERT INTO ferry_event (source, event_id, type, payload, payload_sha256, next_attempt_at, first_delivered_at, last_delivered_at)
			SELECT 'bench', 'evt_' || i, 'bench', p, sha256(p), now(), now(), now()
			FROM generate_series(1, `+fmt.Sprint(n)+`) i,
			     LATERAL (SELECT convert_to('{"n":' || i || ',"pad":"`+workPad+`"}', 'UTF8') AS p) payload;
			ANALYZE ferry_event;`)
		return err
	}
}

// ferryWork runs a ferry.Client with cfg (Store and handler filled in) on
// the store open makes, until the rate is measured.
func ferryWork(open func(ctx context.Context) (ferry.Store, func(), error), countPool *pgxpool.Pool, cfg ferry.Config) func(ctx context.Context, window time.Duration) (float64, error) {
	return func(ctx context.Context, window time.Duration) (float64, error) {
		store, closeStore, err := open(ctx)
		if err != nil {
			return 0, err
		}
		defer closeStore()
		cfg.Store, cfg.Logger = store, slog.New(slog.DiscardHandler)
		client, err := ferry.NewClient(&cfg)
		if err != nil {
			return 0, err
		}
		client.Handle("bench", func(context.Context, *ferry.Delivery) error { return nil })
		if err := client.Start(ctx); err != nil {
			return 0, err
		}
		rate, err := measureDone(ctx, countPool, window, "SELECT count(*) FROM ferry_event_done")
		_ = client.Stop(context.Background())
		return rate, err
	}
}

// ferryBest is Ferry with workers workers on a pool of o.poolSize.
func ferryBest(pool *pgxpool.Pool, o *options, workers int) workRun {
	return workRun{
		name:     "ferry",
		settings: fmt.Sprintf("Workers %d, pool %d, Ferry defaults otherwise (LeaseTTL %s, PollInterval %s)", workers, o.poolSize, ferry.DefaultLeaseTTL, ferry.DefaultPollInterval),
		seed:     ferrySeed(pool),
		work: ferryWork(func(context.Context) (ferry.Store, func(), error) {
			s := postgres.New(pool, nil)
			return s, s.Close, nil
		}, pool, ferry.Config{Workers: workers}),
	}
}

// ferryDefault is Ferry as postgres.Open and ferry.Config's zero value set
// it up: its own pool, the default worker count.
func ferryDefault(s *schema, pool *pgxpool.Pool) workRun {
	return workRun{
		name:     "ferry",
		settings: fmt.Sprintf("postgres.Open (Ferry's own pool), ferry.Config zero value (Workers %d)", ferry.DefaultWorkers),
		seed:     ferrySeed(pool),
		work: ferryWork(func(ctx context.Context) (ferry.Store, func(), error) {
			st, err := postgres.Open(ctx, s.url, nil)
			if err != nil {
				return nil, nil, err
			}
			return st, st.Close, nil
		}, pool, ferry.Config{}),
	}
}

// benchArgs is River's job: the same no-op as Ferry's handler, the same
// 1 KB payload.
type benchArgs struct {
	N   int    `json:"n"`
	Pad string `json:"pad"`
}

func (benchArgs) Kind() string { return "bench" }

func riverMigrate(ctx context.Context, pool *pgxpool.Pool) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: riverLog()})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

func riverLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func riverWorkers() *river.Workers {
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[benchArgs]) error { return nil }))
	return ws
}

func riverSeed(pool *pgxpool.Pool) func(ctx context.Context, n int) error {
	return func(ctx context.Context, n int) error {
		if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
			return err
		}
		inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: riverLog()})
		if err != nil {
			return err
		}
		const chunk = 10_000
		for i := 0; i < n; i += chunk {
			params := make([]river.InsertManyParams, 0, chunk)
			for j := i; j < min(n, i+chunk); j++ {
				params = append(params, river.InsertManyParams{Args: benchArgs{N: j, Pad: workPad}})
			}
			if _, err := inserter.InsertManyFast(ctx, params); err != nil {
				return err
			}
		}
		_, err = pool.Exec(ctx, "ANALYZE river_job")
		return err
	}
}

// riverWork runs a River client made by newClient on pool until the rate is
// measured.
func riverWork(countPool *pgxpool.Pool, newClient func(ctx context.Context) (*river.Client[pgx.Tx], func(), error)) func(ctx context.Context, window time.Duration) (float64, error) {
	return func(ctx context.Context, window time.Duration) (float64, error) {
		client, release, err := newClient(ctx)
		if err != nil {
			return 0, err
		}
		defer release()
		if err := client.Start(ctx); err != nil {
			return 0, err
		}
		rate, err := measureDone(ctx, countPool, window, "SELECT count(*) FROM river_job WHERE state = 'completed'")
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
		return rate, err
	}
}

// riverBest is River with MaxWorkers workers on a pool of o.poolSize, its
// fetch cooldown and poll interval at the minimum River accepts.
func riverBest(pool *pgxpool.Pool, o *options, workers int) workRun {
	return workRun{
		name: "river " + riverVersion,
		settings: fmt.Sprintf("MaxWorkers %d, pool %d, FetchCooldown %s and FetchPollInterval %s (River's minimums), River defaults otherwise",
			workers, o.poolSize, river.FetchCooldownMin, river.FetchPollIntervalMin),
		seed: riverSeed(pool),
		work: riverWork(pool, func(context.Context) (*river.Client[pgx.Tx], func(), error) {
			c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
				Logger:            riverLog(),
				FetchCooldown:     river.FetchCooldownMin,
				FetchPollInterval: river.FetchPollIntervalMin,
				Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
				Workers:           riverWorkers(),
			})
			return c, func() {}, err
		}),
	}
}

// riverDefaultWorkers is MaxWorkers of River's own documentation example:
// River has no default, a queue must name it.
const riverDefaultWorkers = 100

// riverDefault is River as its documentation sets it up: pgxpool.New's pool
// (pgx's default size), MaxWorkers 100, everything else River's default
// (FetchCooldown 100ms, FetchPollInterval 1s).
func riverDefault(s *schema, pool *pgxpool.Pool) workRun {
	return workRun{
		name: "river " + riverVersion,
		settings: fmt.Sprintf("pgxpool.New (pgx's default pool), MaxWorkers %d (River's doc example; it has no default), River defaults otherwise (FetchCooldown %s, FetchPollInterval %s)",
			riverDefaultWorkers, river.FetchCooldownDefault, river.FetchPollIntervalDefault),
		seed: riverSeed(pool),
		work: riverWork(pool, func(ctx context.Context) (*river.Client[pgx.Tx], func(), error) {
			own, err := pgxpool.New(ctx, s.url)
			if err != nil {
				return nil, nil, err
			}
			c, err := river.NewClient(riverpgxv5.New(own), &river.Config{
				Logger:  riverLog(),
				Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverDefaultWorkers}},
				Workers: riverWorkers(),
			})
			if err != nil {
				own.Close()
				return nil, nil, err
			}
			return c, own.Close, nil
		}),
	}
}

// riverVersion is the River this binary was built with (the bench's go.mod
// pins it), read from the build info.
var riverVersion = moduleVersion("github.com/riverqueue/river")

// workWarmup and -work-window measure a worker's steady rate: after
// workWarmup from the start, the done count is read twice, the window apart,
// from the database (so a completion counts only once it is committed). The
// run fails rather than report a rate measured on an emptying queue.
const workWarmup = 1 * time.Second

// measureDone reads the committed done count after workWarmup and again
// after window, and returns the rate between the two.
func measureDone(ctx context.Context, pool *pgxpool.Pool, window time.Duration, doneSQL string) (float64, error) {
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
	if !sleepCtx(ctx, window) {
		return 0, ctx.Err()
	}
	n2, t2, err := count()
	if err != nil {
		return 0, err
	}
	return float64(n2-n1) / t2.Sub(t1).Seconds(), nil
}
