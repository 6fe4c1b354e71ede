//go:build unix

package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
)

// env is one scenario's world: a store of its own (a PostgreSQL schema or
// a SQLite file in a temporary directory), the sink, the config files and
// the children. close removes all of it.
type env struct {
	opts *Options
	id   string
	dir  string

	schema   string // postgres
	dbPath   string // sqlite
	pgTarget string // host:port of PostgreSQL

	sink  *sink
	store ferry.Store // the harness's own handle, for checking
	pg    *postgres.Store
	lite  *sqlite.Store

	mu      sync.Mutex
	procs   map[int]*proc // slot → current child
	ports   map[int]string
	exited  []*proc // every child that is gone, for reclaim times
	lines   map[string]int
	lastErr error

	maxAttempts    int
	measureReclaim bool
	extraEnv       func(slot int) []string
	supervised     atomic.Bool // restart children that die
	restartIn      time.Duration
	restarts       atomic.Int64
}

func newEnv(ctx context.Context, o *Options, scenario string) (*env, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &env{opts: o, id: hex.EncodeToString(b), procs: map[int]*proc{}, ports: map[int]string{}, lines: map[string]int{}, maxAttempts: 25, restartIn: 200 * time.Millisecond}
	dir, err := os.MkdirTemp("", "ferry-chaos-"+scenario+"-")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	if e.sink, err = newSink(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.openStore(ctx); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// appName is the application_name of every child's connection: the only
// backends the harness may terminate.
func (e *env) appName() string { return "ferry-chaos-" + e.id }

// storeURL is the store.url children use; via, if set, replaces the
// PostgreSQL host:port (the fault proxy).
func (e *env) storeURL(via string) string {
	if e.opts.Store == "sqlite" {
		return "sqlite:" + e.dbPath
	}
	return e.pgURL(via, e.appName())
}

func (e *env) pgURL(via, app string) string {
	u, _ := url.Parse(e.opts.DatabaseURL)
	if via != "" {
		u.Host = via
	}
	q := u.Query()
	q.Set("options", "-c search_path="+e.schema)
	q.Set("application_name", app)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func (e *env) openStore(ctx context.Context) error {
	if e.opts.Store == "sqlite" {
		e.dbPath = filepath.Join(e.dir, "ferry.db")
		st, err := sqlite.Open(e.dbPath, nil)
		if err != nil {
			return err
		}
		e.lite, e.store = st, st
	} else {
		u, err := url.Parse(e.opts.DatabaseURL)
		if err != nil {
			return fmt.Errorf("chaos: database url: %w", err)
		}
		e.pgTarget = u.Host
		e.schema = "ferry_chaos_" + e.id
		if err := e.adminExec(ctx, "CREATE SCHEMA "+pgx.Identifier{e.schema}.Sanitize()); err != nil {
			e.schema = ""
			return fmt.Errorf("chaos: create schema: %w", err)
		}
		st, err := postgres.Open(ctx, e.pgURL("", e.appName()+"-harness"), nil)
		if err != nil {
			return err
		}
		e.pg, e.store = st, st
	}
	if err := e.store.Migrate(ctx); err != nil {
		return fmt.Errorf("chaos: migrate: %w", err)
	}
	// The transactional handler's effect table has no unique constraint on
	// purpose: a second effect of one event must show up as a second row.
	return e.execSQL(ctx,
		`CREATE TABLE chaos_effect (idempotency_key text NOT NULL, source text NOT NULL, event_id text NOT NULL, attempt integer NOT NULL, body_sha256 text NOT NULL, worker text NOT NULL)`,
		`CREATE TABLE chaos_poison (source text NOT NULL, event_id text NOT NULL)`)
}

// adminExec runs sql on a connection of its own to the base database.
func (e *env) adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, e.opts.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// execSQL runs statements in the store's schema or file.
func (e *env) execSQL(ctx context.Context, stmts ...string) error {
	for _, s := range stmts {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if e.pg != nil {
				_, err = e.pg.Pool().Exec(ctx, s)
			} else {
				_, err = e.lite.DB().ExecContext(ctx, s)
			}
			// DDL on Ferry's tables (the read-only triggers) takes exclusive
			// locks while the children are working: PostgreSQL may break a
			// lock cycle by aborting it, and then it is simply tried again.
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
				break
			}
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("chaos: %s: %w", strings.Fields(s)[0], err)
		}
	}
	return nil
}

func (e *env) sqlDB() *sql.DB { return e.lite.DB() }

// writeConfig writes a config with the five sources forwarding to the sink.
func (e *env) writeConfig(name, storeURL string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `[store]
url = %q
[http]
listen = "127.0.0.1:0"
store_timeout = "2s"
retry_after = "1s"
[worker]
workers = 10
lease_ttl = %q
heartbeat = %q
poll_interval = "100ms"
shutdown_grace = "1s"
retry_base = "50ms"
retry_cap = "500ms"
[admin]
listen = "127.0.0.1:0"
[ui]
enabled = false
`, storeURL, e.opts.TTL.String(), (e.opts.TTL / 4).String())
	for _, s := range sources {
		fmt.Fprintf(&b, `
[[source]]
name = %q
provider = %q
secrets = [%q]
max_attempts = %d
`, s.name, s.provider, s.secret, e.maxAttempts)
		if s.provider == "hmac" {
			fmt.Fprintf(&b, "[source.hmac]\nheader = %q\nprefix = %q\nevent_id_field = \"id\"\ntype_field = \"type\"\n", genericScheme.Header, genericScheme.Prefix)
		}
		fmt.Fprintf(&b, "[source.forward]\nurl = %q\ntimeout = \"5s\"\n", e.sink.url)
	}
	path := filepath.Join(e.dir, name+".toml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// port gives each slot one address for its whole life, so the sender's
// targets survive restarts.
func (e *env) port(slot int) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a, ok := e.ports[slot]; ok {
		return a, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	a := ln.Addr().String()
	ln.Close()
	e.ports[slot] = a
	return a, nil
}

// childEnv is the environment of every child: the chaos handler when the
// run is transactional, the broken mode when asked for.
func (e *env) childEnv(slot int) []string {
	var env []string
	if e.opts.Handler == "tx" {
		env = append(env, "FERRY_CHAOS_HANDLER=tx-effect")
	}
	if e.opts.Broken != "" {
		env = append(env, "FERRY_CHAOS_BROKEN="+e.opts.Broken)
	}
	if e.extraEnv != nil {
		env = append(env, e.extraEnv(slot)...)
	}
	return env
}

// start runs a child in slot with config and waits until it serves.
func (e *env) start(ctx context.Context, slot int, config string, env ...string) (*proc, error) {
	addr, err := e.port(slot)
	if err != nil {
		return nil, err
	}
	p, err := startProc(ctx, e.opts.Bin, slot, config, addr, append(e.childEnv(slot), env...), e.countLine)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs[slot] = p
	e.mu.Unlock()
	go e.watch(ctx, p, config)
	if err := p.waitReady(ctx, 60*time.Second); err != nil {
		if p.killTime().IsZero() && p.alive() {
			return nil, err
		}
		// It crashed on purpose before it was ready; the supervisor restarts it.
	}
	return p, nil
}

// watch restarts a child that died, restartIn later, while supervised.
func (e *env) watch(ctx context.Context, p *proc, config string) {
	<-p.exited
	e.mu.Lock()
	e.exited = append(e.exited, p)
	current := e.procs[p.slot] == p
	e.mu.Unlock()
	if !current || !e.supervised.Load() || ctx.Err() != nil {
		return
	}
	time.Sleep(e.restartIn)
	if !e.supervised.Load() || ctx.Err() != nil {
		return
	}
	e.restarts.Add(1)
	if _, err := e.start(ctx, p.slot, config); err != nil {
		e.mu.Lock()
		e.lastErr = err
		e.mu.Unlock()
	}
}

func (e *env) countLine(p *proc, msg string, rec map[string]any) {
	key := ""
	switch msg {
	case "ferry: chaos crash point":
		p.markKilled(time.Now())
		point, _ := rec["point"].(string)
		key = "crash:" + point
	case "ferry: lease lost; this attempt's verdict was not recorded":
		key = "lease_lost"
	case "ferry: heartbeat failed; retrying":
		key = "heartbeat_failed"
	case "ferry: claim failed":
		key = "claim_failed"
	case "ferry: could not record completion; the lease will lapse":
		key = "completion_refused"
	}
	if key == "" {
		return
	}
	e.mu.Lock()
	e.lines[key]++
	e.mu.Unlock()
}

func (e *env) lineCount(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lines[key]
}

// targets lists the receivers up now (by slot address).
func (e *env) targets() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for slot, p := range e.procs {
		if p.alive() {
			out = append(out, e.ports[slot])
		}
	}
	return out
}

func (e *env) proc(slot int) *proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.procs[slot]
}

// stopAll ends supervision and shuts every child down.
func (e *env) stopAll() {
	e.supervised.Store(false)
	e.mu.Lock()
	ps := make([]*proc, 0, len(e.procs))
	for _, p := range e.procs {
		ps = append(ps, p)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(5 * time.Second) }()
	}
	wg.Wait()
}

// killTimes maps each gone child's pid to when the harness killed it (or
// it crashed on purpose).
func (e *env) killTimes() map[int]time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[int]time.Time{}
	for _, p := range e.exited {
		if t := p.killTime(); !t.IsZero() {
			out[p.pid] = t
		}
	}
	for _, p := range e.procs {
		if t := p.killTime(); !t.IsZero() {
			out[p.pid] = t
		}
	}
	return out
}

// close removes everything the scenario made: children, sink, store
// handle, schema, files.
func (e *env) close() {
	e.stopAll()
	if e.sink != nil {
		e.sink.close()
	}
	if e.pg != nil {
		e.pg.Close()
	}
	if e.lite != nil {
		_ = e.lite.Close()
	}
	if e.schema != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		for range 10 { // PostgreSQL may just be coming back from pgcrash
			if err = e.adminExec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE"); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: could not drop schema %s: %v (drop it by hand)\n", e.schema, err)
		}
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// drain waits until no stored event is pending or in progress.
func (e *env) drain(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		res, err := e.store.EventList(ctx, &ferry.EventListParams{States: []ferry.State{ferry.StatePending, ferry.StateInProgress}, Limit: 1})
		if err == nil && len(res.Events) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("drain: %w", err)
			}
			return errors.New("drain: events still pending or in progress after " + limit.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pidOf reads the pid out of a worker id (hostname-pid-random).
func pidOf(worker string) int {
	parts := strings.Split(worker, "-")
	if len(parts) < 3 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid
}
