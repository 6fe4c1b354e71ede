// Command bench measures Ferry against the designs and peers it replaces, on
// this machine, in one run: every ratio's baseline runs in the same process,
// alternating A B A B, and the median of the rounds is reported.
//
//	cd bench && go run . [-only NAME] [-rounds 3]
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
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags; every benchmark reads them.
type options struct {
	url        string
	only       []string
	rounds     int
	ingestDur  time.Duration
	clients    int
	poolSize   int
	workEvents int
	workers    int
	tmp        string
}

// result is what one benchmark adds to the table and the summary line.
type result struct {
	rows    [][]string        // table rows: name, figure, detail
	summary map[string]string // key=value pairs of the last line
}

type benchmark struct {
	name string // as -only names it
	keys []string
	run  func(ctx context.Context, o *options) (*result, error)
}

var benchmarks = []benchmark{
	{"ingest_pg", []string{"ingest_pg_x"}, runIngestPG},
	{"ingest_sqlite", []string{"ingest_sqlite_x"}, runIngestSQLite},
	{"work", []string{"work_pg_x_river"}, runWork},
	{"conns", []string{"conns_ferry", "conns_txheld"}, runConns},
	{"reclaim", []string{"reclaim_ms"}, runReclaim},
	{"rss", []string{"rss_mb"}, runRSS},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	o := &options{}
	var only string
	flag.StringVar(&o.url, "db", cmpEnv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL `url`")
	flag.StringVar(&only, "only", "", "run only these benchmarks (comma-separated): "+names())
	flag.IntVar(&o.rounds, "rounds", 3, "rounds per pair (A B A B ...), median reported; at least 3")
	flag.DurationVar(&o.ingestDur, "ingest-dur", 4*time.Second, "measured length of one ingest run")
	flag.IntVar(&o.clients, "clients", 64, "concurrent HTTP connections of the ingest load generator")
	flag.IntVar(&o.poolSize, "pool", 16, "PostgreSQL pool size of both sides of ingest_pg and work")
	flag.IntVar(&o.workEvents, "work-events", 100_000, "events stored before each work run")
	flag.IntVar(&o.workers, "workers", 100, "worker count of both Ferry and River in the work benchmark")
	flag.Parse()
	if o.rounds < 3 {
		return errors.New("-rounds: at least 3, so that the median means something")
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
	maxConns, err := serverMaxConnections(ctx, o.url)
	if err != nil {
		return fmt.Errorf("postgres at %s: %w", redact(o.url), err)
	}
	host, _ := os.Hostname()
	fmt.Printf("bench: %s, %s/%s, %d CPUs (GOMAXPROCS %d), PostgreSQL max_connections=%d\n",
		host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), maxConns)

	var rows [][]string
	summary := map[string]string{}
	var failed []string
	for _, b := range benchmarks {
		if len(o.only) > 0 && !slices.Contains(o.only, b.name) {
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
	for _, b := range benchmarks {
		for _, k := range b.keys {
			if v, ok := summary[k]; ok {
				line = append(line, k+"="+v)
			} else if len(o.only) == 0 || slices.Contains(o.only, b.name) {
				line = append(line, k+"=NA")
			}
		}
	}
	fmt.Println("bench: " + strings.Join(line, " "))
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
