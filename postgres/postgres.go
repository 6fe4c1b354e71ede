// Package postgres is Ferry's production store: ferry.TxStore on PostgreSQL
// through pgx v5. Any number of Ferry instances can share one database:
// claims lock rows with FOR UPDATE SKIP LOCKED, every time is the database's
// clock, and receipts wake other instances with LISTEN/NOTIFY.
//
// Tables live in the connection's search_path schema, so one database can
// hold several isolated inboxes (and tests can each use their own schema).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
)

var (
	_ ferry.TxStore[pgx.Tx] = (*Store)(nil)
	_ ferry.Pooled          = (*Store)(nil)
)

// Config tunes a Store. The zero value (or nil) is right for production.
type Config struct {
	// Now overrides the database clock for every lease, backoff, age and
	// timestamp, so tests can move time at will. Defaults to nil: PostgreSQL's
	// now(), the one clock all instances share.
	Now func() time.Time
	// ArchiveSpan is the time range of one archive partition, in whole days;
	// partitions created from now on use it. Defaults to 24 hours.
	ArchiveSpan time.Duration

	// MaxConns is the pool size Open uses when the URL does not set
	// pool_max_conns: size it from the work the pool carries
	// (ferry.Workload.Conns). Zero keeps pgx's default, max(4, CPUs), which
	// a receiver and a client together outgrow.
	MaxConns int

	// ConnectTimeout is the connect_timeout Open uses when the URL (or
	// PGCONNECT_TIMEOUT) sets none: it bounds each new connection's dial
	// and startup, per host, so that a server or proxy that takes the
	// connection and never answers fails it instead of holding it for as
	// long as TCP lets it. Zero keeps pgx's default: no bound.
	ConnectTimeout time.Duration
}

// Store is a ferry.TxStore on a pgx pool. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	now      func() time.Time
	// archiveSpanDays is Config.ArchiveSpan in days, at least 1.
	archiveSpanDays int
	// migrateLockTimeout and migrateTries are Migrate's bound on each lock
	// wait and its tries: migrationLockTimeout and migrationTries, unless a
	// test shortens them.
	migrateLockTimeout time.Duration
	migrateTries       int
	closed             context.Context // done once Close is called
	close              context.CancelFunc
	listeners          sync.WaitGroup
}

// New returns a Store on pool. The caller keeps ownership of the pool: Close
// stops the Store's listeners but leaves the pool open. config may be nil,
// and its MaxConns means nothing here: size the pool itself with
// ferry.Workload.Conns (pgxpool's default, max(4, CPUs), is too small for
// transactional handlers, and Client.Start says so). Unlike Open it checks
// and sets nothing: the pool's sessions must keep synchronous_commit on and
// run read committed (Ping fails otherwise), and should run with jit off,
// as Open's do.
func New(pool *pgxpool.Pool, config *Config) *Store {
	s := &Store{pool: pool}
	if config == nil {
		config = &Config{}
	}
	s.now = config.Now
	s.archiveSpanDays = max(1, int(config.ArchiveSpan/(24*time.Hour)))
	s.migrateLockTimeout, s.migrateTries = migrationLockTimeout, migrationTries
	s.closed, s.close = context.WithCancel(context.Background())
	return s
}

// MaxConns is the pool's size (ferry.Pooled): each running HandleTx handler
// holds one of its connections.
func (s *Store) MaxConns() int { return int(s.pool.Config().MaxConns) }

// Open connects a pool to url and returns a Store that owns it: Close closes
// the pool. It fails if the server does not answer, and with
// ferry.ErrNotDurable if a commit there may return before it is on disk.
//
// The pool's sessions run with jit off unless url sets jit (jit=on, or
// options=-c jit=on): Ferry's queries are short, and JIT compiling the plan
// of one whose estimated cost passes jit_above_cost takes seconds it never
// wins back: EventStats, run on every metrics scrape, took 5.5 s instead of
// 15 ms once the archive's ledger held a thousand lapsed attempts. They run
// read committed (default_transaction_isolation) unless url sets it, whatever
// the role or database sets: Ferry's statements are written for it, and
// under repeatable read or serializable a claim, a completion or a
// transactional handler's commit fails with a serialization error (SQLSTATE
// 40001) where read committed waits and rechecks. A url that sets another
// fails Open with ferry.ErrMisconfigured, as Ping would on every call.
func Open(ctx context.Context, url string, config *Config) (*Store, error) {
	poolConfig, err := parseURL(url)
	if err != nil {
		return nil, wrap("open", err)
	}
	// SETs, not startup parameters: PgBouncer refuses the connection of a
	// client that sends one it does not know.
	var sets []string
	if !setsParam(poolConfig.ConnConfig.RuntimeParams, "jit") {
		sets = append(sets, "SET jit = off")
	}
	if !setsParam(poolConfig.ConnConfig.RuntimeParams, "default_transaction_isolation") {
		sets = append(sets, "SET default_transaction_isolation = 'read committed'")
	}
	if len(sets) > 0 {
		poolConfig.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, strings.Join(sets, "; "))
			return err
		}
	}
	if config != nil && config.MaxConns > 0 && !strings.Contains(url, "pool_max_conns") {
		poolConfig.MaxConns = int32(config.MaxConns)
	}
	if config != nil && config.ConnectTimeout > 0 && poolConfig.ConnConfig.ConnectTimeout == 0 && !strings.Contains(url, "connect_timeout") {
		poolConfig.ConnConfig.ConnectTimeout = config.ConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return nil, wrap("open", err)
	}
	if err := durable(ctx, pool); err != nil {
		pool.Close()
		return nil, wrap("open", loginRefused(err))
	}
	if err := readCommitted(ctx, pool); err != nil {
		pool.Close()
		return nil, wrap("open", err)
	}
	s := New(pool, config)
	s.ownsPool = true
	return s, nil
}

// parseURL parses url as pgxpool does. A URL it cannot use is
// ErrInvalidParams with pgx's reason, cut where it starts quoting the URL:
// pgx masks a password only as well as it can parse the URL. Two mistakes
// parse but put part of the password where a failed connection prints it:
// an unencoded '@' in it (read into the host) or '/' (the rest read as the
// database name). No host holds an '@', and no database Ferry is given.
func parseURL(url string) (*pgxpool.Config, error) {
	const fix = "(the URL is not shown: it may hold a password); in the password write '%' as %25, '@' as %40, '/' as %2F, '?' as %3F and a space as %20"
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		reason := "it does not parse"
		var pe *pgconn.ParseConfigError
		// A quote in the URL could pass for the end of pgx's quoting.
		if errors.As(err, &pe) && !strings.ContainsAny(url, "`\"") {
			// "cannot parse `URL`: reason"; the last "`: " is past the URL
			// even when the URL holds one.
			msg := pe.Error()
			if i := strings.LastIndex(msg, "`: "); i >= 0 {
				// Cut at the first quote: what follows may be a piece of
				// the URL, and pgx does not escape quotes inside it.
				reason, _, _ = strings.Cut(msg[i+len("`: "):], `"`)
				reason = strings.TrimSpace(reason) + " …"
			}
		}
		return nil, fmt.Errorf("%w: the URL cannot be used: %s %s", ferry.ErrInvalidParams, reason, fix)
	}
	cc := config.ConnConfig
	// A host that is a path is a Unix socket's folder, which may hold one.
	atInHost := func(h string) bool { return !strings.HasPrefix(h, "/") && strings.Contains(h, "@") }
	misread := strings.Contains(cc.Database, "@") || atInHost(cc.Host)
	for _, f := range cc.Fallbacks {
		misread = misread || atInHost(f.Host)
	}
	if misread {
		return nil, fmt.Errorf("%w: the URL's host or database holds an '@' %s", ferry.ErrInvalidParams, fix)
	}
	return config, nil
}

// setsParam reports whether a connection's startup parameters set the
// setting named name: as a parameter (any case, as the server reads names),
// or in options as "-c name=…", "-cname=…" or "--name=…".
func setsParam(params map[string]string, name string) bool {
	for p := range params {
		if strings.EqualFold(p, name) {
			return true
		}
	}
	for _, opt := range strings.Fields(params["options"]) {
		p, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(opt, "-c"), "--"), "=")
		if strings.EqualFold(p, name) {
			return true
		}
	}
	return false
}

// durable checks, on a connection of the pool (which also proves the
// server answers), that a commit is on disk when it returns: a URL's
// options, the role, the database or the server may turn that off. Any
// role may read both settings.
func durable(ctx context.Context, pool *pgxpool.Pool) error {
	var syncCommit, fsync string
	if err := pool.QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('fsync')").Scan(&syncCommit, &fsync); err != nil {
		return err
	}
	switch {
	case syncCommit == "off":
		return fmt.Errorf("%w: synchronous_commit is off; remove it from the URL, or set it on for Ferry's role (ALTER ROLE ... SET synchronous_commit = on)", ferry.ErrNotDurable)
	case fsync == "off":
		return fmt.Errorf("%w: the server runs with fsync off; turn it on in postgresql.conf", ferry.ErrNotDurable)
	}
	return nil
}

// loginRefused makes err ferry.ErrMisconfigured when the server refused
// the connection's login for a reason only the URL or the server's config
// can change: a wrong password, a role or database it does not have, no
// pg_hba.conf entry, no CONNECT privilege. A refusal that may pass (an
// LDAP or Kerberos server it could not reach is 28000 too), or one of
// several hosts (another may be the primary), stays as it is: trying again
// may succeed.
func loginRefused(err error) error {
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	if !errors.As(err, &connErr) || !errors.As(err, &pgErr) || severalHosts(connErr.Config) {
		return err
	}
	fix := loginFix(pgErr.Code, pgErr.Message)
	if fix == "" {
		return err
	}
	return fmt.Errorf("%w: the server at %s:%d refused the login of user %q to database %q: %s (SQLSTATE %s); %s",
		ferry.ErrMisconfigured, connErr.Config.Host, connErr.Config.Port, connErr.Config.User, connErr.Config.Database, pgErr.Message, pgErr.Code, fix)
}

// severalHosts reports whether config names more than one server: pgx's
// fallbacks also hold the same server again without TLS (sslmode=prefer,
// the default, and allow).
func severalHosts(config *pgconn.Config) bool {
	for _, f := range config.Fallbacks {
		if f.Host != config.Host || f.Port != config.Port {
			return true
		}
	}
	return false
}

// loginFix is the fix for a login refusal no retry can pass, by its
// SQLSTATE and message; empty for any other. The messages are the server's
// in English (lc_messages): in another language the 28000 and 42501 cases
// stay errors a retry may pass.
func loginFix(code, msg string) string {
	switch {
	case code == "28P01": // invalid_password
		return "check the user and password in the URL (percent-encoded)"
	case code == "28000" && (strings.Contains(msg, "does not exist") || strings.Contains(msg, "pg_hba.conf") || strings.Contains(msg, "not permitted to log in")):
		return "check the user in the URL, and the server's roles and pg_hba.conf"
	case code == "3D000": // invalid_catalog_name
		return "check the database name in the URL, or create the database"
	case code == "42501" && strings.HasPrefix(msg, "permission denied for database"):
		return "GRANT CONNECT ON DATABASE to the URL's user"
	case code == "42501" && strings.HasPrefix(msg, "permission denied to set parameter"):
		return "remove the setting from the URL, or run as a role that may set it"
	}
	return ""
}

// readCommitted checks that a session of the pool runs read committed by
// default: only a url that sets default_transaction_isolation gets Open a
// session that does not.
func readCommitted(ctx context.Context, pool *pgxpool.Pool) error {
	var isolation string
	if err := pool.QueryRow(ctx, "SELECT current_setting('default_transaction_isolation')").Scan(&isolation); err != nil {
		return err
	}
	return isolationRefused(isolation, "remove default_transaction_isolation from the URL (Open then sets read committed)")
}

// isolationRefused is ferry.ErrMisconfigured for a session whose default
// isolation is not read committed, with fix; nil for read committed.
func isolationRefused(isolation, fix string) error {
	if isolation == "read committed" {
		return nil
	}
	return fmt.Errorf("%w: sessions run with default_transaction_isolation = %q, and Ferry's claims and completions fail with serialization errors (SQLSTATE 40001) under it; run them read committed: %s",
		ferry.ErrMisconfigured, isolation, fix)
}

// Close stops receipt subscriptions, waits for their connections to close,
// and closes the pool if Open created it, which waits for every connection
// in use: a HandleTx handler still running after Client.Stop returned holds
// one, so Close returns when that handler does.
func (s *Store) Close() {
	s.close()
	s.listeners.Wait()
	if s.ownsPool {
		s.pool.Close()
	}
}

// wrap prefixes err with the store and the Store method that returns it
// ("postgres: event claim many: …"), keeping its sentinel for errors.Is. nil
// stays nil.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// Pool returns the pool the Store runs on, for the caller's own queries.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// InTx runs fn in a new read committed transaction, committing if fn
// returns nil and rolling back otherwise; fn's error is returned as it is,
// wrapped with ferry.ErrTxDone too when fn ended tx itself.
// Read committed whatever the session's default: a transactional handler's
// EventCompleteTx after a heartbeat renewed its lease, for one, fails under
// repeatable read (SQLSTATE 40001). The store's own read-write transactions
// begin here too.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after Commit, a no-op
	if err := fn(tx); err != nil {
		// A tx fn committed or rolled back itself answers ErrTxClosed.
		if errors.Is(tx.Rollback(ctx), pgx.ErrTxClosed) {
			return fmt.Errorf("postgres: %w: %w", ferry.ErrTxDone, err)
		}
		return err
	}
	return tx.Commit(ctx)
}

// nowArg is the @now argument of every query: NULL lets the SQL fall back to
// the database's now().
func (s *Store) nowArg() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

// micros passes a duration to SQL, which multiplies it by 1 microsecond:
// PostgreSQL's own resolution.
func micros(d time.Duration) int64 { return d.Microseconds() }
