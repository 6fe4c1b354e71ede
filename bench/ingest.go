package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/ferry-inbox/ferry/postgres"
)

// The ingest benchmarks compare two processes under the same load: the
// `ferry serve --role receiver` binary a user runs (its metrics, tracing
// hooks, body limits, memory limit and its own pool), and a bare receiver,
// which this program serves in a child process of its own (bareReceiverCmd)
// so that neither side shares a runtime with the load generator.

// ingestSide is one receiver under load: start readies a fresh, empty store
// and starts its process, stop ends both. app is the application_name of
// its PostgreSQL connections ("" on SQLite), sampled for its peaks.
type ingestSide struct {
	name  string
	app   string
	start func(ctx context.Context) (target string, stop func(), err error)
}

// ingestSideResult is what one side measured over the rounds.
type ingestSideResult struct {
	rps     []float64
	p99     []time.Duration
	failed  int
	conns   connPeaks // the largest peaks of any round
	sampled bool
}

// ingestRounds is -rounds made even, so that each side runs first as often
// as last: 3 becomes 4.
func ingestRounds(rounds int) int { return rounds + rounds%2 }

// ingestOrder is the order of the sides in round r: as given in even
// rounds, reversed in odd ones (A B, B A; A B C, C B A).
func ingestOrder(r, sides int) []int {
	order := make([]int, sides)
	for i := range order {
		order[i] = i
		if r%2 == 1 {
			order[i] = sides - 1 - i
		}
	}
	return order
}

// ingestRun runs every side once a round, for ingestRounds(o.rounds)
// rounds in ingestOrder, with the same load. On PostgreSQL (checkpoint) a
// CHECKPOINT runs once the side's process is up, before its load, so that
// no side pays for the WAL of the one before.
func ingestRun(ctx context.Context, o *options, key string, checkpoint bool, sides []ingestSide) ([]*ingestSideResult, error) {
	res := make([]*ingestSideResult, len(sides))
	for i := range res {
		res[i] = &ingestSideResult{}
	}
	rounds := ingestRounds(o.rounds)
	for round := range rounds {
		for _, i := range ingestOrder(round, len(sides)) {
			side, r := sides[i], res[i]
			lr, peaks, err := ingestOnce(ctx, o, checkpoint, side, fmt.Sprintf("evt_r%d_", round))
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", side.name, round+1, err)
			}
			r.rps, r.p99, r.failed = append(r.rps, lr.rps()), append(r.p99, lr.p99()), r.failed+lr.failed
			if peaks != nil {
				r.sampled = true
				r.conns.inUse, r.conns.open = max(r.conns.inUse, peaks.inUse), max(r.conns.open, peaks.open)
			}
			fmt.Fprintf(os.Stderr, "  %s round %d: %s: %.0f req/s, p99 %s, %d non-2xx%s\n",
				key, round+1, side.name, lr.rps(), ms(lr.p99()), lr.failed, connNote(peaks))
		}
	}
	return res, nil
}

// ingestOnce starts side, checkpoints if asked, runs the load and stops the
// side. It samples the side's connections when it has an app name.
func ingestOnce(ctx context.Context, o *options, checkpoint bool, side ingestSide, prefix string) (*loadResult, *connPeaks, error) {
	target, stop, err := side.start(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	if checkpoint {
		if err := adminExec(ctx, o.url, "CHECKPOINT"); err != nil {
			return nil, nil, err
		}
	}
	var sampler *connSampler
	if side.app != "" {
		if sampler, err = sampleConns(ctx, o.url, side.app, 100*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
	lr, err := closedLoop(ctx, target, prefix, o.clients, 500*time.Millisecond, o.ingestDur)
	if sampler == nil {
		return lr, nil, err
	}
	peaks, serr := sampler.finish()
	if err == nil {
		err = serr
	}
	return lr, &peaks, err
}

func connNote(p *connPeaks) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf(", peak %d connections open, %d in use", p.open, p.inUse)
}

// ratios is a's req/s ÷ b's, round by round.
func ratios(a, b *ingestSideResult) []float64 {
	x := make([]float64, len(a.rps))
	for i := range x {
		x[i] = a.rps[i] / b.rps[i]
	}
	return x
}

// sideRow is one side's line under a ratio.
func sideRow(name string, r *ingestSideResult) []string {
	detail := fmt.Sprintf("p99 %s, %d non-2xx; req/s by round %s", ms(medianDur(r.p99)), r.failed, fmtFloatsN(r.rps, 0))
	if r.sampled {
		detail += fmt.Sprintf("; peak %d PostgreSQL connections open, %d in use", r.conns.open, r.conns.inUse)
	}
	return []string{"  " + name, fmt.Sprintf("%.0f req/s", median(r.rps)), detail}
}

// ingestSetup is the row that says what each side of an ingest benchmark
// runs.
func ingestSetup(o *options, bare, ferryStore, fresh string) []string {
	return []string{"  setup", "", fmt.Sprintf("ferry serve --role receiver of this checkout (Stripe signature and timestamp check, durable dedupe, %s, a log line a delivery at its default level) against a bare receiver (%s, no verification, no log), each a child process started fresh for each run; the same load: %d clients, closed loop, 1 KB signed bodies, 10%% duplicates, 0.5s warm-up then %s counted; %d rounds, sides in order then reversed; %s",
		ferryStore, bare, o.clients, o.ingestDur, ingestRounds(o.rounds), fresh)}
}

// ferryIngestSide is `ferry serve --role receiver` of this checkout on the
// store storeURL makes, with one Stripe source and Ferry's defaults for
// everything else, logging at its default level (info: a line a delivery).
func ferryIngestSide(o *options, name, app string, storeURL func(ctx context.Context) (string, func(), error)) ingestSide {
	run := 0
	return ingestSide{name: name, app: app, start: func(ctx context.Context) (string, func(), error) {
		u, cleanup, err := storeURL(ctx)
		if err != nil {
			return "", nil, err
		}
		run++
		// role receiver forwards nothing; the config still names a URL.
		c, err := startServe(ctx, o.tmp, fmt.Sprintf("ingest-ferry-%d", run), configTOML(u, "http://127.0.0.1:9/unused", "", 0), "receiver")
		if err != nil {
			cleanup()
			return "", nil, err
		}
		return "http://" + c.addr + "/webhooks/stripe", func() { c.stop(); cleanup() }, nil
	}}
}

// bareIngestSide is the bare receiver in a child process: reset readies
// its store, args are its flags.
func bareIngestSide(o *options, name, app string, reset func(ctx context.Context) ([]string, func(), error)) ingestSide {
	return ingestSide{name: name, app: app, start: func(ctx context.Context) (string, func(), error) {
		args, cleanup, err := reset(ctx)
		if err != nil {
			return "", nil, err
		}
		c, err := startBare(ctx, args...)
		if err != nil {
			cleanup()
			return "", nil, err
		}
		return "http://" + c.addr + "/webhooks/stripe", func() { c.stop(); cleanup() }, nil
	}}
}

// barePools are the pool sizes the bare PostgreSQL receiver runs at: the
// shared -pool, and one connection per client, where no request waits for
// a connection (it commits one row per request).
func barePools(o *options) []int {
	if o.clients == o.poolSize {
		return []int{o.poolSize}
	}
	return []int{o.poolSize, o.clients}
}

func runIngestPG(ctx context.Context, o *options) (*result, error) {
	sFerry, ferryPool, releaseFerry, err := createSchemaPool(ctx, o.url, "ingest_ferry", 2)
	if err != nil {
		return nil, err
	}
	defer releaseFerry()
	store := postgres.New(ferryPool, nil)
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	sBare, barePool, releaseBare, err := createSchemaPool(ctx, o.url, "ingest_bare", 2)
	if err != nil {
		return nil, err
	}
	defer releaseBare()
	if _, err := barePool.Exec(ctx, bareTableSQL); err != nil {
		return nil, err
	}

	const ferryApp = "bench_ingest_ferry_serve"
	ferryURL, err := withParams(sFerry.url, map[string]string{"application_name": ferryApp})
	if err != nil {
		return nil, err
	}
	sides := []ingestSide{ferryIngestSide(o, "ferry serve --role receiver", ferryApp,
		func(ctx context.Context) (string, func(), error) {
			_, err := ferryPool.Exec(ctx, ferryEmptySQL)
			return ferryURL, func() {}, err
		})}
	for _, n := range barePools(o) {
		app := fmt.Sprintf("bench_ingest_bare_%d", n)
		u, err := withParams(sBare.url, map[string]string{"application_name": app})
		if err != nil {
			return nil, err
		}
		sides = append(sides, bareIngestSide(o, fmt.Sprintf("bare, pool %d", n), app,
			func(ctx context.Context) ([]string, func(), error) {
				_, err := barePool.Exec(ctx, "TRUNCATE bare_event")
				return []string{"-store", "pg", "-dsn", u, "-pool", fmt.Sprint(n)}, func() {}, err
			}))
	}
	res, err := ingestRun(ctx, o, "ingest_pg", true, sides)
	if err != nil {
		return nil, err
	}
	ferryRes, shared := res[0], res[1]
	best, bestName := shared, sides[1].name
	for i := 2; i < len(res); i++ {
		if median(res[i].rps) > median(best.rps) {
			best, bestName = res[i], sides[i].name
		}
	}
	xShared, xBest := ratios(ferryRes, shared), ratios(ferryRes, best)
	rounds := ingestRounds(o.rounds)
	rows := [][]string{
		{"ingest_pg_x", fmt.Sprintf("%.2f", median(xShared)), fmt.Sprintf("ferry serve ÷ bare on -pool %d, req/s; median of %d rounds' ratios %s", o.poolSize, rounds, fmtFloats(xShared))},
		{"ingest_pg_best_x", fmt.Sprintf("%.2f", median(xBest)), fmt.Sprintf("ferry serve ÷ bare at its best pool (%s; pools tried %v), req/s; median of %d rounds' ratios %s", bestName, barePools(o), rounds, fmtFloats(xBest))},
	}
	for i, r := range res {
		rows = append(rows, sideRow(sides[i].name, r))
	}
	rows = append(rows, ingestSetup(o, "one INSERT … ON CONFLICT DO NOTHING per request on its pool", "sizes its own pool", "a CHECKPOINT before each side's load"))
	return &result{
		rows: rows,
		summary: map[string]string{
			"ingest_pg_x":      fmt.Sprintf("%.2f", median(xShared)),
			"ingest_pg_best_x": fmt.Sprintf("%.2f", median(xBest)),
		},
	}, nil
}

func runIngestSQLite(ctx context.Context, o *options) (*result, error) {
	run := 0
	fresh := func(what string) (string, func()) {
		run++
		path := filepath.Join(o.tmp, fmt.Sprintf("%s-%d.db", what, run))
		return path, func() { removeDB(path) }
	}
	ferrySide := ferryIngestSide(o, "ferry serve --role receiver", "",
		func(context.Context) (string, func(), error) {
			path, cleanup := fresh("ferry")
			return "sqlite:" + path, cleanup, nil
		})
	bareSide := bareIngestSide(o, "bare", "",
		func(context.Context) ([]string, func(), error) {
			path, cleanup := fresh("bare")
			return []string{"-store", "sqlite", "-dsn", path}, cleanup, nil
		})
	res, err := ingestRun(ctx, o, "ingest_sqlite", false, []ingestSide{ferrySide, bareSide})
	if err != nil {
		return nil, err
	}
	x := ratios(res[0], res[1])
	return &result{
		rows: [][]string{
			{"ingest_sqlite_x", fmt.Sprintf("%.2f", median(x)), fmt.Sprintf("ferry serve ÷ bare, req/s; median of %d rounds' ratios %s", ingestRounds(o.rounds), fmtFloats(x))},
			sideRow(ferrySide.name, res[0]),
			sideRow(bareSide.name, res[1]),
			ingestSetup(o, "one INSERT OR IGNORE per BEGIN IMMEDIATE, WAL, synchronous=FULL, one connection", "sqlite.Store", "a fresh file per run"),
		},
		summary: map[string]string{"ingest_sqlite_x": fmt.Sprintf("%.2f", median(x))},
	}, nil
}

// bareReceiverCmd, as the first argument, makes this program the bare
// receiver (bareMain) instead of the bench.
const bareReceiverCmd = "bare-receiver"

// bareMain serves the bare receiver on 127.0.0.1 and a free port, writes
// "listen ADDR" to stdout once it listens, and serves until SIGTERM. It
// logs nothing.
func bareMain(args []string) error {
	fs := flag.NewFlagSet(bareReceiverCmd, flag.ContinueOnError)
	store := fs.String("store", "", "pg or sqlite")
	dsn := fs.String("dsn", "", "PostgreSQL URL (its schema holds bare_event) or SQLite file")
	poolSize := fs.Int("pool", 16, "PostgreSQL pool size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h http.Handler
	switch *store {
	case "pg":
		cfg, err := pgxpool.ParseConfig(*dsn)
		if err != nil {
			return err
		}
		cfg.MaxConns = int32(*poolSize)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		h = barePGHandler(pool)
	case "sqlite":
		db, err := openBareSQLite(ctx, *dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		h = bareSQLiteHandler(db)
	default:
		return fmt.Errorf("-store %q: pg or sqlite", *store)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Println("listen", ln.Addr().String())
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// startBare runs this program as the bare receiver with args and waits for
// its address.
func startBare(ctx context.Context, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{bareReceiverCmd}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listen "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case c.addr = <-addr:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("bare receiver exited before serving")
	case <-time.After(30 * time.Second):
		c.kill()
		return nil, fmt.Errorf("bare receiver did not start in 30s")
	case <-ctx.Done():
		c.kill()
		return nil, ctx.Err()
	}
}

const bareTableSQL = `
CREATE TABLE bare_event (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    payload     bytea       NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source, event_id)
)`

// bareBody reads the body and its event id the way any receiver must, and
// nothing more: no signature, no timestamp.
func bareBody(w http.ResponseWriter, r *http.Request) ([]byte, string, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return nil, "", false
	}
	var ev struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		http.Error(w, "bad event", http.StatusBadRequest)
		return nil, "", false
	}
	return body, ev.ID, true
}

func barePGHandler(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, id, ok := bareBody(w, r)
		if !ok {
			return
		}
		_, err := pool.Exec(r.Context(),
			"INSERT INTO bare_event (source, event_id, payload) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
			"stripe", id, body)
		bareReply(w, err)
	})
}

// openBareSQLite opens path the way Ferry's store opens its writer: WAL,
// synchronous=FULL, one connection, BEGIN IMMEDIATE.
func openBareSQLite(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE bare_event (
		id INTEGER PRIMARY KEY, source TEXT NOT NULL, event_id TEXT NOT NULL,
		payload BLOB NOT NULL, received_at INTEGER NOT NULL, UNIQUE (source, event_id))`); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func bareSQLiteHandler(db *sql.DB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, id, ok := bareBody(w, r)
		if !ok {
			return
		}
		tx, err := db.BeginTx(r.Context(), nil)
		if err == nil {
			_, err = tx.ExecContext(r.Context(),
				"INSERT OR IGNORE INTO bare_event (source, event_id, payload, received_at) VALUES (?, ?, ?, ?)",
				"stripe", id, body, time.Now().UnixMicro())
			if err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
		}
		bareReply(w, err)
	})
}

func bareReply(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

func removeDB(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		_ = os.Remove(p)
	}
}

// fmtFloats formats v with two decimals: [1.59 1.66].
func fmtFloats(v []float64) string { return fmtFloatsN(v, 2) }

// fmtFloatsN formats v with prec decimals.
func fmtFloatsN(v []float64, prec int) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = strconv.FormatFloat(f, 'f', prec, 64)
	}
	return "[" + strings.Join(s, " ") + "]"
}
