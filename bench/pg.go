package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema is one schema of the benchmark's own, dropped with everything in
// it by drop.
type schema struct {
	name string
	url  string // o.url with search_path set to the schema
}

// createSchema makes a fresh bench_<what>_<hex> schema. Its URL pins
// search_path to it on every connection, so Ferry's and River's tables land
// there and nowhere else.
func createSchema(ctx context.Context, baseURL, what string) (*schema, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "bench_" + what + "_" + hex.EncodeToString(b[:])
	if err := adminExec(ctx, baseURL, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", name, err)
	}
	u, err := withParams(baseURL, map[string]string{"search_path": name})
	if err != nil {
		return nil, err
	}
	return &schema{name: name, url: u}, nil
}

// drop removes the schema and everything in it. It uses its own context:
// cleanup runs even when the run was interrupted.
func (s *schema) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adminExec(ctx, s.url, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" CASCADE"); err != nil {
		fmt.Printf("bench: warning: drop schema %s: %v\n", s.name, err)
	}
}

// pool opens a pool on the schema with at most maxConns connections, named
// app in pg_stat_activity.
func (s *schema) pool(ctx context.Context, app string, maxConns int) (*pgxpool.Pool, error) {
	u, err := withParams(s.url, map[string]string{"application_name": app})
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// createSchemaPool creates a fresh schema for what (createSchema) and a
// pool of at most maxConns on it, named bench_<what> in pg_stat_activity.
// release closes the pool, then drops the schema.
func createSchemaPool(ctx context.Context, baseURL, what string, maxConns int) (s *schema, pool *pgxpool.Pool, release func(), err error) {
	s, err = createSchema(ctx, baseURL, what)
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err = s.pool(ctx, "bench_"+what, maxConns)
	if err != nil {
		s.drop()
		return nil, nil, nil, err
	}
	return s, pool, func() { pool.Close(); s.drop() }, nil
}

func adminExec(ctx context.Context, u, sql string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// serverSettings describes the PostgreSQL server for the run's header: its
// version and the settings that decide commit cost, connection limits,
// caching and whether dead rows are cleaned up during the run.
func serverSettings(ctx context.Context, u string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var version, fsync, syncCommit, maxConns, sharedBuffers, autovacuum string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('max_connections'),
		current_setting('shared_buffers'), current_setting('autovacuum')`).Scan(&version, &fsync, &syncCommit, &maxConns, &sharedBuffers, &autovacuum)
	return fmt.Sprintf("PostgreSQL %s (fsync %s, synchronous_commit %s, max_connections %s, shared_buffers %s, autovacuum %s)",
		version, fsync, syncCommit, maxConns, sharedBuffers, autovacuum), err
}

func serverMaxConnections(ctx context.Context, u string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&n)
	return n, err
}

// withParams sets query parameters of a postgres:// URL; pgx sends unknown
// ones (search_path, application_name) as run-time parameters.
func withParams(raw string, params map[string]string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("database url: %w", err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

// connSampler polls pg_stat_activity for the backends of one
// application_name and keeps the peak number open and the peak in use:
// running a statement or inside a transaction, or holding a LISTEN.
type connSampler struct {
	mu    sync.Mutex
	peaks connPeaks
	err   error
	done  chan struct{}
	ctx   context.Context // done when sampling stops
	stop  context.CancelFunc
}

type connPeaks struct{ inUse, open int }

// ferryEmptySQL empties a Ferry schema of events and everything they leave
// behind (ledger, counters, conflicts, replays, actions), so that every run
// starts from the same store; archive partitions stay, as in production.
const ferryEmptySQL = `TRUNCATE ferry_event, ferry_event_key, ferry_event_done, ferry_attempt,
	ferry_attempt_done, ferry_done_count, ferry_conflict, ferry_replay, ferry_action`

const connCountSQL = `
SELECT count(*) FILTER (WHERE state IS DISTINCT FROM 'idle' OR query ILIKE 'listen %'),
       count(*)
FROM pg_stat_activity
WHERE application_name = $1`

func sampleConns(ctx context.Context, u, app string, every time.Duration) (*connSampler, error) {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &connSampler{done: make(chan struct{}), ctx: ctx, stop: cancel}
	go func() {
		defer close(s.done)
		defer conn.Close(context.Background())
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			var inUse, open int
			// pg_stat_activity is a snapshot per transaction; each query
			// runs in its own.
			if err := conn.QueryRow(ctx, connCountSQL, app).Scan(&inUse, &open); err != nil {
				if ctx.Err() == nil {
					s.mu.Lock()
					s.err = err
					s.mu.Unlock()
				}
				return
			}
			s.mu.Lock()
			s.peaks.inUse, s.peaks.open = max(s.peaks.inUse, inUse), max(s.peaks.open, open)
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s, nil
}

// finish stops sampling and returns the peaks.
func (s *connSampler) finish() (connPeaks, error) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peaks, s.err
}
