// Command bench measures Ferry against the designs and peers it replaces, on
// this machine, in one run: every ratio's baseline runs in the same run,
// alternating A B, then B A (ingest: every side in order, then reversed,
// for an even count of rounds), and the median of the rounds is reported.
//
//	cd bench && go run . [-only NAME,NAME] [-rounds 3]
//
// It needs the PostgreSQL of TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/test) and a writable temp directory. It
// creates its own schemas and files and removes them before it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags; every benchmark reads them.
type options struct {
	url            string
	only           []string
	rounds         int
	ingestDur      time.Duration
	clients        int
	poolSize       int
	workEvents     int
	workWindow     time.Duration
	workSweep      []int
	e2eBurst       time.Duration
	e2ePaced       time.Duration
	e2eWarmup      time.Duration
	e2eRate        int
	drainMax       time.Duration
	connsHold      time.Duration
	connsRate      int
	connsSteady    time.Duration
	rssRate        int
	rssDur         time.Duration
	rssWorstDur    time.Duration
	scaleSizes     []int
	scaleBacklog   int
	scaleDur       time.Duration
	scaleBefore    bool
	scaleBeforeRev string
	tmp            string
}

// result is what one benchmark adds to the table and the summary line.
type result struct {
	rows    [][]string        // table rows: name, figure, detail
	summary map[string]string // key=value pairs of the last line
}

type benchmark struct {
	name string // as -only names it
	run  func(ctx context.Context, o *options) (*result, error)
	// named: it runs only when -only names it (scale loads 20M rows, far
	// longer than everything else together).
	named bool
}

var benchmarks = []benchmark{
	{name: "ingest_pg", run: runIngestPG},
	{name: "ingest_sqlite", run: runIngestSQLite},
	{name: "e2e_pg", run: runE2EPG},
	{name: "e2e_sqlite", run: runE2ESQLite},
	{name: "work", run: runWork},
	{name: "conns", run: runConns},
	{name: "reclaim", run: runReclaim},
	{name: "rss", run: runRSS},
	{name: "scale", run: runScale, named: true},
}

// lineKeys are the keys of the last line, in its order, each with the
// benchmark that sets it.
var lineKeys = []struct{ key, bench string }{
	{"ingest_pg_x", "ingest_pg"},
	{"ingest_pg_best_x", "ingest_pg"},
	{"ingest_sqlite_x", "ingest_sqlite"},
	{"e2e_pg_burst_x", "e2e_pg"},
	{"e2e_sqlite_burst_x", "e2e_sqlite"},
	{"e2e_pg_p99_ms", "e2e_pg"},
	{"e2e_sqlite_p99_ms", "e2e_sqlite"},
	{"work_pg_x_river_best", "work"},
	{"work_pg_x_river_default", "work"},
	{"conns_ferry", "conns"},
	{"conns_ferry_open", "conns"},
	{"conns_txheld_in_use", "conns"},
	{"conns_txheld_waiting", "conns"},
	{"reclaim_ms", "reclaim"},
	{"rss_mb", "rss"},
	{"rss_worst_mb", "rss"},
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == bareReceiverCmd {
		if err := bareMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench "+bareReceiverCmd+":", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	o := &options{}
	var only, sweep, sizes string
	flag.StringVar(&o.url, "db", cmpEnv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL `url`")
	flag.StringVar(&only, "only", "", "run only these benchmarks (comma-separated): "+names())
	flag.IntVar(&o.rounds, "rounds", 3, "rounds per benchmark (pairs alternate A B, B A; ingest rounds it up to an even count), median reported; below 3 only for smoke tests")
	flag.DurationVar(&o.ingestDur, "ingest-dur", 4*time.Second, "measured length of one ingest run")
	flag.IntVar(&o.clients, "clients", 64, "concurrent HTTP connections of the ingest load generator and of the e2e burst")
	flag.IntVar(&o.poolSize, "pool", 16, "PostgreSQL pool size of ingest_pg's bare receiver (it also runs at a pool of -clients; ferry serve sizes its own) and of both sides of work's best runs")
	flag.IntVar(&o.workEvents, "work-events", 200_000, "events stored before each work run")
	flag.DurationVar(&o.workWindow, "work-window", 4*time.Second, "measured length of one work run (after 1s of warm-up)")
	flag.StringVar(&sweep, "work-sweep", "100,500,1000", "worker counts tried for Ferry's and River's best (comma-separated)")
	flag.DurationVar(&o.e2eBurst, "e2e-burst", 5*time.Second, "length of the e2e burst")
	flag.DurationVar(&o.e2ePaced, "e2e-paced", 10*time.Second, "length of the e2e paced run")
	flag.IntVar(&o.e2eRate, "e2e-rate", 200, "deliveries a second of the e2e paced run")
	flag.DurationVar(&o.e2eWarmup, "e2e-warmup", time.Second, "first part of the e2e paced run whose deliveries are sent but not counted in its percentiles (reported apart)")
	flag.DurationVar(&o.drainMax, "drain-max", 5*time.Minute, "longest wait for a backlog to reach the app before the benchmark fails")
	flag.DurationVar(&o.connsHold, "conns-hold", 30*time.Second, "how long the downstream holds each event in conns (shorten only for smoke tests)")
	flag.IntVar(&o.connsRate, "conns-rate", 5, "events a second in conns")
	flag.DurationVar(&o.connsSteady, "conns-steady", 10*time.Second, "how long conns keeps arriving once rate × hold are in flight")
	flag.IntVar(&o.rssRate, "rss-rate", 200, "deliveries a second of the rss steady run (a load the worker keeps up with)")
	flag.DurationVar(&o.rssDur, "rss-dur", 20*time.Second, "length of the rss steady run")
	flag.DurationVar(&o.rssWorstDur, "rss-worst-dur", 10*time.Second, "length of the rss worst case (1 MiB bodies on -clients connections)")
	flag.StringVar(&sizes, "scale-sizes", "1000000,20000000", "done events stored at each step of scale (comma-separated, ascending); the first is the baseline of the *_x ratios")
	flag.IntVar(&o.scaleBacklog, "scale-backlog", 100_000, "pending events standing during scale")
	flag.DurationVar(&o.scaleDur, "scale-dur", 5*time.Second, "measured length of scale's receipt and claim runs")
	flag.BoolVar(&o.scaleBefore, "scale-before", true, "also run scale on the layout before migration 003 (built from git)")
	flag.StringVar(&o.scaleBeforeRev, "scale-before-rev", "", "git revision of that layout; defaults to the parent of the commit that added migration 003")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the bench process (load generators, the e2e app, work's in-process workers; not the receivers, which are child processes) to `file`")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-scale-sizes %q: positive counts, comma-separated", sizes)
		}
		o.scaleSizes = append(o.scaleSizes, n)
	}
	if o.rounds < 1 {
		return errors.New("-rounds: at least 1 (3 or more for figures worth recording)")
	}
	if o.rounds < 3 {
		fmt.Fprintf(os.Stderr, "bench: -rounds %d: a smoke test; record only runs of 3 rounds or more\n", o.rounds)
	}
	for _, f := range strings.Split(sweep, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-work-sweep %q: positive worker counts, comma-separated", sweep)
		}
		o.workSweep = append(o.workSweep, n)
	}
	if o.connsRate < 1 || o.connsHold < time.Second || o.e2eRate < 1 || o.rssRate < 1 {
		return errors.New("-conns-rate, -e2e-rate and -rss-rate must be at least 1, -conns-hold at least 1s")
	}
	if only != "" {
		o.only = strings.Split(only, ",")
		for _, n := range o.only {
			if !slices.ContainsFunc(benchmarks, func(b benchmark) bool { return b.name == n }) {
				return fmt.Errorf("-only %q: use one of %s", n, names())
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "ferry-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o.tmp = tmp

	started := time.Now()
	server, err := serverSettings(ctx, o.url)
	if err != nil {
		return fmt.Errorf("postgres at %s: %w", redact(o.url), err)
	}
	fmt.Printf("bench: %s; %s\n", machineLine(ctx), server)

	var rows [][]string
	summary := map[string]string{}
	var failed []string
	for _, b := range benchmarks {
		if (len(o.only) > 0 || b.named) && !slices.Contains(o.only, b.name) {
			continue
		}
		t := time.Now()
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", b.name)
		res, err := b.run(ctx, o)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failed = append(failed, b.name)
			fmt.Fprintf(os.Stderr, "bench: %s failed: %v\n", b.name, err)
			rows = append(rows, []string{b.name, "FAILED", err.Error()})
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s took %s\n", b.name, time.Since(t).Round(time.Second))
		rows = append(rows, res.rows...)
		for k, v := range res.summary {
			summary[k] = v
		}
	}

	printTable(rows)
	fmt.Printf("total %s\n", time.Since(started).Round(time.Second))
	var line []string
	for _, k := range lineKeys {
		if v, ok := summary[k.key]; ok {
			line = append(line, k.key+"="+v)
		} else if len(o.only) == 0 || slices.Contains(o.only, k.bench) {
			line = append(line, k.key+"=NA")
		}
	}
	fmt.Println("bench: " + strings.Join(line, " "))
	if v, ok := summary["scale"]; ok {
		fmt.Println("scale: " + v)
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

func printTable(rows [][]string) {
	widths := []int{0, 0}
	for _, r := range rows {
		for i := range widths {
			widths[i] = max(widths[i], len(r[i]))
		}
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("%-*s  %-*s  %s\n", widths[0], r[0], widths[1], r[1], r[2])
	}
	fmt.Println()
}

func names() string {
	var n []string
	for _, b := range benchmarks {
		n = append(n, b.name)
	}
	return strings.Join(n, ", ")
}

func cmpEnv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
