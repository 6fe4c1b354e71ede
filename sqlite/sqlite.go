// Package sqlite is Ferry's embedded store: a ferry.TxStore on one SQLite
// file through modernc.org/sqlite (pure Go, no cgo). It needs no server and
// suits one process, or a few processes on one host sharing the file.
//
// Durability: the database runs in WAL mode with synchronous=FULL (and
// fullfsync on, which macOS needs to flush the drive's cache), so a receipt
// that EventReceive acknowledged survives a crash of the process and a
// power loss of the host.
//
// Concurrency: all writes go through one connection (a pool of one) and
// begin with BEGIN IMMEDIATE, so writers in this process queue in Go instead
// of failing with SQLITE_BUSY, and writers in other processes wait on
// SQLite's lock for up to the busy timeout (5 s). Reads (EventGet, EventList,
// AttemptList, ConflictList) use a separate pool of read-only connections
// and run beside writes, as WAL allows. SQLite has no SKIP LOCKED; a claim is
// one write transaction, and write transactions are serialized, so two
// claimers can never take the same event: correct by construction.
//
// Clock: "the database's clock" is the process clock (Config.Now), which
// processes on one host share.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	msqlite "modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ferry-inbox/ferry"
)

// busyTimeout is how long a write waits for another process's write lock
// before it fails with SQLITE_BUSY.
const busyTimeout = 5 * time.Second

// minBusyTimeout is the least busy_timeout, in ms, a path may set: below
// it, connections opening together (the pools, migrate beside serve) fail
// instead of waiting.
const minBusyTimeout = 1000

// readConns is the size of the read pool.
const readConns = 4

// Config configures a Store. The zero value, or a nil *Config, is ready to use.
type Config struct {
	// Now overrides the clock; nil means time.Now. For SQLite the process
	// clock is the database's clock. Tests pass a fake clock. Times are kept
	// to the microsecond, in UTC.
	Now func() time.Time

	// MaxPageCount, if > 0, caps the database at this many pages (PRAGMA
	// max_page_count; a page is 4 KiB by default). A write that would grow
	// the file past it fails with SQLITE_FULL, as on a full disk; tests use
	// it to prove that such a write returns an error and leaves nothing
	// behind. Zero means no cap beyond SQLite's own.
	MaxPageCount int

	// MustExist makes Open fail, with an error that is fs.ErrNotExist,
	// where the file is not there (ferry.ErrInvalidParams where its
	// directory is not either), rather than create it: for a tool that
	// reads or changes a store in use, to which a mistyped path would
	// otherwise show an empty one. Defaults to false: Open creates the file.
	MustExist bool
}

// Store is a ferry.TxStore on one SQLite file. Open one per process and
// file, and Close it when done.
type Store struct {
	db     *sql.DB // one connection, BEGIN IMMEDIATE: every write
	readDB *sql.DB // read-only connections for Get and List
	now    func() time.Time
	// migrateBusyLimit bounds Migrate's wait for another process's write
	// lock: defaultMigrateBusyLimit, shorter in tests.
	migrateBusyLimit time.Duration

	mu          sync.Mutex
	subscribers map[chan struct{}]struct{}
	closed      chan struct{}
	closeOnce   sync.Once
}

var _ ferry.TxStore[*sql.Tx] = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path, a file path
// or a "file:" URI, and configures every connection for durability. config
// may be nil. Open does not create the schema: call Migrate.
//
// The database must be a file, synced fully in WAL mode: Open refuses a
// journal_mode or synchronous the path's own query sets otherwise, and reads
// the write connection back, returning ferry.ErrNotDurable where a commit
// could be lost, ferry.ErrInvalidParams where WAL could not be had. A path
// it cannot use (its directory missing, a directory, not a database, or
// query_only on) is ferry.ErrInvalidParams too, with the fix.
func Open(path string, config *Config) (*Store, error) {
	if config == nil {
		config = &Config{}
	}
	if path == "" {
		return nil, fmt.Errorf("sqlite: open: %w: the path is empty; name a file", ferry.ErrNotDurable)
	}
	if err := queryDurable(path); err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	if config.MustExist {
		if _, err := os.Stat(filePath(path)); err != nil {
			if inMemory(path) { // no file to find, nor a store another process shares
				err = errInMemory
			} else if perr := pathRefused(path); perr != nil { // no Open would make it
				err = perr
			}
			return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
		}
	}

	pragmas := []string{
		"busy_timeout(" + strconv.FormatInt(busyTimeout.Milliseconds(), 10) + ")",
		"foreign_keys(1)",
		"fullfsync(1)", // macOS: fsync alone leaves a commit in the drive's cache
		"journal_mode(WAL)",
		"synchronous(FULL)",
	}
	writePragmas := pragmas
	if config.MaxPageCount > 0 {
		writePragmas = append(writePragmas[:len(writePragmas):len(writePragmas)],
			"max_page_count("+strconv.Itoa(config.MaxPageCount)+")")
	}

	db, err := sql.Open("sqlite", dsn(path, writePragmas, "_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	// Connect now: the write connection switches the file to WAL before any
	// reader opens it, and a bad path fails here rather than on first use.
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %q: %w", path, unopenable(path, err))
	}
	if err := durable(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	if err := writable(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}

	readDB, err := sql.Open("sqlite", dsn(path, append(pragmas[:len(pragmas):len(pragmas)], "query_only(1)")))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	readDB.SetMaxOpenConns(readConns)
	readDB.SetMaxIdleConns(readConns)

	now := config.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{
		db:               db,
		readDB:           readDB,
		now:              now,
		migrateBusyLimit: defaultMigrateBusyLimit,
		subscribers:      make(map[chan struct{}]struct{}),
		closed:           make(chan struct{}),
	}
	return s, nil
}

// filePath is the file a path or "file:" URI names: without its query and,
// for a URI, its fragment, unescaped and without its authority
// ("file:///data/ferry.db").
func filePath(path string) string {
	path, _, _ = strings.Cut(path, "?")
	rest, ok := strings.CutPrefix(path, "file:")
	if !ok {
		return path
	}
	rest, _, _ = strings.Cut(rest, "#")
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		// The authority is empty or "localhost"; the path starts at its "/".
		if i := strings.IndexByte(after, '/'); i >= 0 {
			rest = after[i:]
		}
	}
	if unescaped, err := url.PathUnescape(rest); err == nil {
		rest = unescaped
	}
	return rest
}

// errInMemory refuses an in-memory database: what it holds is gone at
// Close, and no other process sees it.
var errInMemory = fmt.Errorf("%w: the database is in memory, gone at Close; name a file", ferry.ErrNotDurable)

// inMemory reports whether path names an in-memory database in a way
// that can be read without opening it (":memory:", mode=memory,
// vfs=memdb). Open itself finds any other spelling by the file the
// database has (none).
func inMemory(path string) bool {
	if filePath(path) == ":memory:" {
		return true
	}
	_, query, _ := strings.Cut(path, "?")
	q, err := url.ParseQuery(query)
	return err == nil && (q.Get("mode") == "memory" || q.Get("vfs") == "memdb")
}

// durable reads back what the path's query may have overridden (the driver
// applies its _sync and _journal_mode keys, and pragmas that sort later,
// after Ferry's): an acknowledged receipt must survive a crash and a Close.
func durable(db *sql.DB) error {
	var (
		sync, fullSync int
		mode, file     string
	)
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		return err
	}
	if err := db.QueryRow("PRAGMA fullfsync").Scan(&fullSync); err != nil {
		return err
	}
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	// An in-memory database, by any spelling, has no file name.
	if err := db.QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file); err != nil {
		return err
	}
	if file == "" {
		return errInMemory
	}
	return errors.Join(synchronousRefused(strconv.Itoa(sync)), fullSyncRefused(strconv.Itoa(fullSync)), journalModeRefused(mode))
}

// unopenable is err, the failure to open the file at path, as
// ferry.ErrInvalidParams with the fix when the path is the cause: a
// directory that is not there, a directory named for the file, a file this
// process may not open or that is not a database. Any other failure stays
// as it is.
func unopenable(path string, err error) error {
	if perr := pathRefused(path); perr != nil {
		return perr
	}
	var e *msqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY:
			return fmt.Errorf("%w: %w: the file's directory must exist and be writable by this process, and the file too if it is there (WAL keeps -wal and -shm files beside it)", ferry.ErrInvalidParams, err)
		case sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w: %w: the path names a file that is not a SQLite database: fix the path", ferry.ErrInvalidParams, err)
		}
	}
	return err
}

// pathRefused is the fix, as ferry.ErrInvalidParams, when the file path
// names can never be a store: a directory, or a file in a directory that
// is not there. Nil otherwise.
func pathRefused(path string) error {
	file := filePath(path)
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return fmt.Errorf("%w: %s is a directory: name a file in it, like %s", ferry.ErrInvalidParams, file, filepath.Join(file, "ferry.db"))
	}
	if dir := filepath.Dir(file); !dirExists(dir) {
		return fmt.Errorf("%w: the directory %s does not exist: create it (the store makes its file, not the directories above it), or fix the path", ferry.ErrInvalidParams, dir)
	}
	return nil
}

// dirExists reports whether dir is a directory, or may be one: a failure
// to look at it other than its absence says nothing.
func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR)
	}
	return fi.IsDir()
}

// writable refuses a write connection the path's query makes read-only
// (query_only): the store opens, then its first write, a migration or a
// receipt, fails.
func writable(db *sql.DB) error {
	var queryOnly int
	if err := db.QueryRow("PRAGMA query_only").Scan(&queryOnly); err != nil {
		return err
	}
	if queryOnly != 0 {
		return fmt.Errorf("%w: query_only is on, and the store writes every receipt; remove the path's query_only", ferry.ErrInvalidParams)
	}
	return nil
}

// queryDurable refuses a journal_mode or synchronous that the path's query
// sets ("_pragma=journal_mode(DELETE)", "_journal_mode=MEMORY", "_sync=1")
// and that would leave WAL or FULL, and _txlock=deferred: the driver takes
// the path's _txlock before Ferry's, and a deferred write that finds another
// process's commit since it began fails with SQLITE_BUSY at once instead of
// waiting. Reading the write connection back is not
// enough: the driver runs the query on every connection each pool opens, and
// a reader switching the file out of WAL while the writer holds it fails
// later, with SQLITE_BUSY, where the writer reads back WAL.
//
// It also refuses locking_mode=exclusive and a busy_timeout under
// minBusyTimeout: either makes the store's own connections, and the other
// processes on the file, fail with SQLITE_BUSY rather than take turns.
func queryDurable(path string) error {
	_, query, ok := strings.Cut(path, "?")
	if !ok {
		return nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil // the driver refuses it, saying why
	}
	set := map[string][]string{
		"journal_mode": append(q["_journal_mode"], q["_journal"]...),
		"synchronous":  append(q["_synchronous"], q["_sync"]...),
	}
	for _, p := range q["_pragma"] {
		// "journal_mode(DELETE)", "main.journal_mode = 'delete'": the
		// driver runs "pragma " + p.
		p = strings.ToLower(strings.TrimSpace(p))
		i := strings.IndexAny(p, "(= \t")
		if i < 0 {
			continue // a pragma read sets nothing
		}
		name, value := p[:i], strings.Trim(p[i:], " \t\n()=;'\"`")
		if _, unqualified, ok := strings.Cut(name, "."); ok {
			name = unqualified
		}
		set[name] = append(set[name], value)
	}
	var errs []error
	for _, lock := range q["_txlock"] {
		if strings.EqualFold(lock, "deferred") {
			errs = append(errs, fmt.Errorf("%w: _txlock is %s; the store's writes begin immediate, so that they wait for another process's instead of failing; remove the path's _txlock", ferry.ErrInvalidParams, lock))
		}
	}
	for _, mode := range set["journal_mode"] {
		errs = append(errs, journalModeRefused(strings.ToLower(mode)))
	}
	for _, mode := range set["locking_mode"] {
		if strings.EqualFold(mode, "exclusive") {
			errs = append(errs, fmt.Errorf("%w: locking_mode is exclusive, which shuts the store's readers, other processes (ferry migrate, doctor, events) and a restarted ferry out of the file; remove the path's locking_mode", ferry.ErrInvalidParams))
		}
	}
	for _, ms := range set["busy_timeout"] {
		if n, err := strconv.Atoi(ms); err == nil && n < minBusyTimeout {
			errs = append(errs, fmt.Errorf("%w: busy_timeout is %d ms; under %d, a connection that opens or writes beside another fails with \"database is locked\" instead of waiting its turn (the store's own is %d); raise it or remove it", ferry.ErrInvalidParams, n, minBusyTimeout, busyTimeout.Milliseconds()))
		}
	}
	for _, level := range set["synchronous"] {
		errs = append(errs, synchronousRefused(strings.ToLower(level)))
	}
	for _, on := range set["fullfsync"] {
		errs = append(errs, fullSyncRefused(strings.ToLower(on)))
	}
	return errors.Join(errs...)
}

// journalModeRefused says why the store cannot run in journal mode mode
// (lower case); nil for WAL.
func journalModeRefused(mode string) error {
	switch mode {
	case "wal":
		return nil
	case "memory", "off":
		return fmt.Errorf("%w: journal_mode is %s, and a crash in a commit can corrupt the file; remove the path's _journal_mode or journal_mode setting", ferry.ErrNotDurable, mode)
	}
	// Durable, but the read pool would wait behind every write.
	return fmt.Errorf("%w: journal_mode is %s, not WAL, which the store needs (its readers run beside the writer); remove the path's setting, or nolock or a VFS that cannot share memory", ferry.ErrInvalidParams, mode)
}

// synchronousRefused says why a synchronous level (lower case, a name or a
// number, as PRAGMA synchronous takes it) can lose a commit; nil for FULL
// or EXTRA. SQLite reads a value it does not know as NORMAL.
func synchronousRefused(level string) error {
	if n := slices.Index([]string{"off", "normal", "full", "extra"}, level); n >= 0 {
		level = strconv.Itoa(n) // as PRAGMA synchronous reads it back
	}
	if level == "2" || level == "3" {
		return nil
	}
	return fmt.Errorf("%w: synchronous is %s, not FULL (2); remove the path's _sync or synchronous setting", ferry.ErrNotDurable, level)
}

// fullSyncRefused says why the store cannot run with fullfsync at on (lower
// case); nil unless it is off. On macOS, fsync leaves a commit in the drive's
// cache, where a power loss takes it: only F_FULLFSYNC, which fullfsync
// turns on, reaches the disk. Other systems ignore it.
func fullSyncRefused(on string) error {
	if !slices.Contains([]string{"0", "off", "false", "no"}, on) {
		return nil // SQLite takes any other number or word as on
	}
	return fmt.Errorf("%w: fullfsync is %s, not on (1), and on macOS a commit then stays in the drive's cache, where a power loss takes it; remove the path's fullfsync setting", ferry.ErrNotDurable, on)
}

// dsn appends the driver's query parameters to path.
func dsn(path string, pragmas []string, extra ...string) string {
	params := make([]string, 0, len(pragmas)+len(extra))
	for _, p := range pragmas {
		params = append(params, "_pragma="+url.QueryEscape(p))
	}
	params = append(params, extra...)
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + strings.Join(params, "&")
}

// Close closes both pools and every ReceiptSubscribe channel.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return errors.Join(s.readDB.Close(), s.db.Close())
}

// DB returns the write-capable handle, for handlers' own tables and for
// tests. It has one connection: do not use it while an InTx function of the
// same goroutine holds it, or the two wait on each other forever.
func (s *Store) DB() *sql.DB { return s.db }

// InTx runs fn in a new write transaction (BEGIN IMMEDIATE), committing if
// fn returns nil and rolling back, and returning fn's error, otherwise. fn
// must do all its work through tx: the Store's other write methods would
// wait for the one write connection that tx holds. So do every worker's
// heartbeats: fn must finish well inside the lease TTL less a heartbeat
// interval, or the leases held meanwhile, fn's own included, lapse.
func (s *Store) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	var fnErr error
	ended := false
	err := s.write(ctx, func(tx *sql.Tx) error {
		fnErr = fn(tx)
		// A tx fn committed or rolled back answers ErrTxDone; so does one
		// database/sql rolled back because ctx ended, which is no sign.
		ended = fnErr != nil && errors.Is(tx.Rollback(), sql.ErrTxDone) && ctx.Err() == nil
		return fnErr
	})
	switch {
	case ended:
		return fmt.Errorf("sqlite: %w: %w", ferry.ErrTxDone, err)
	case err != nil && fnErr == nil: // begin or commit
		return fmt.Errorf("sqlite: %w", err)
	}
	return err
}

// writeTx is InTx for the store's own writes: it wraps errors with op.
func (s *Store) writeTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return wrap(op, s.write(ctx, fn))
}

// write runs fn in a write transaction, committing if fn returns nil and
// rolling back otherwise, or if fn panics, so that the one write
// connection is never kept. fn's error comes back as it is; an error of
// begin or commit says which.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() // after Commit, a no-op
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// wrap prefixes err with the store and the Store method that returns it
// ("sqlite: event claim many: …"), keeping its sentinel for errors.Is. nil
// stays nil.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// Ping checks that the database file answers a query and that the write
// connection can write: pingSQL in a BEGIN IMMEDIATE transaction rolled
// back. Readiness must not wait behind writes: the write check runs only
// while the write connection is idle, within pingWriteTimeout, and only a
// read-only answer (SQLITE_READONLY: ferry.ErrReadOnly) fails it; a busy
// file is a writable one.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.readDB.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return wrap("ping", err)
	}
	if s.db.Stats().InUse > 0 {
		return nil // a write is running
	}
	ctx, cancel := context.WithTimeout(ctx, pingWriteTimeout)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err == nil {
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, pingSQL)
	}
	var e *msqlite.Error
	if errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_READONLY {
		return wrap("ping", fmt.Errorf("%w: %w", ferry.ErrReadOnly, err))
	}
	return nil
}

// pingWriteTimeout bounds Ping's write check: a writer of another process
// holding the file longer says nothing about whether it is writable.
const pingWriteTimeout = 200 * time.Millisecond

// Migrate applies the migrations the database lacks, in order, in one
// write transaction. It is idempotent, and safe when several processes call
// it at once: BEGIN IMMEDIATE makes the second wait, and it then finds
// nothing left to do. A wait past the busy timeout (a migration of another
// process building an index over a large store) is tried again, until ctx
// ends or 5 minutes have passed (a sqlite3 shell left inside BEGIN holds
// the lock for good): then it fails, saying so, with nothing changed.
func (s *Store) Migrate(ctx context.Context) error {
	all, err := ferry.ReadMigrations(migrations, "migration")
	if err != nil {
		return wrap("migrate", err)
	}
	start := time.Now()
	for {
		err := s.migrate(ctx, all)
		var e *msqlite.Error
		if !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY {
			return err
		}
		if waited := time.Since(start); waited >= s.migrateBusyLimit {
			return fmt.Errorf("%w: it waited %s for the write lock another process holds (a migration over a large store, or a sqlite3 shell inside a transaction); nothing was changed: retry once that process is done", err, waited.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(migrateBusyPause):
		}
	}
}

// migrateBusyPause is how long Migrate waits after a busy timeout before
// it asks for the write lock again.
const migrateBusyPause = 100 * time.Millisecond

// defaultMigrateBusyLimit bounds Migrate's wait for another process's
// write lock.
const defaultMigrateBusyLimit = 5 * time.Minute

func (s *Store) migrate(ctx context.Context, all []ferry.Migration) error {
	return s.writeTx(ctx, "migrate", func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, migrationTableSQL); err != nil {
			return err
		}
		applied, err := collectRows(ctx, tx, migrationAppliedSQL, scanValue[int])
		if err != nil {
			return err
		}
		pending, err := ferry.PendingMigrations(all, applied)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return m.Failed(err)
			}
			if _, err := tx.ExecContext(ctx, migrationRecordSQL,
				sql.Named("version", m.Version),
				sql.Named("name", m.Name),
				sql.Named("now", s.nowMicros()),
			); err != nil {
				return err
			}
		}
		return nil
	})
}

// MigratePlan lists the migrations Migrate would apply, each summarised by
// its file's leading comment. It reads only.
func (s *Store) MigratePlan(ctx context.Context) ([]ferry.MigrationStep, error) {
	all, err := ferry.ReadMigrations(migrations, "migration")
	if err != nil {
		return nil, wrap("migrate plan", err)
	}
	var applied []int
	var exists int
	if err := s.readDB.QueryRowContext(ctx, migrationExistsSQL).Scan(&exists); err != nil {
		return nil, wrap("migrate plan", err)
	}
	if exists > 0 {
		if applied, err = collectRows(ctx, s.readDB, migrationAppliedSQL, scanValue[int]); err != nil {
			return nil, wrap("migrate plan", err)
		}
	}
	pending, err := ferry.PendingMigrations(all, applied)
	if err != nil {
		return nil, wrap("migrate plan", err)
	}
	var steps []ferry.MigrationStep
	for _, m := range pending {
		steps = append(steps, m.Step())
	}
	return steps, nil
}

// ReceiptSubscribe returns a channel that receives after this Store commits
// one of the changes ferry.Store names: a new receipt, a requeue, a release
// or a failure sent back to pending. Signals coalesce (buffer 1, never
// blocking the writer). It is in-process only: other processes sharing the file are
// not signalled and rely on polling. The channel closes when ctx is done or
// the Store is closed.
func (s *Store) ReceiptSubscribe(ctx context.Context) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subscribers[ch] = struct{}{}
	s.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.closed:
		}
		s.mu.Lock()
		delete(s.subscribers, ch)
		s.mu.Unlock()
		close(ch)
	}()
	return ch, nil
}

// broadcast wakes every subscriber without waiting for any.
func (s *Store) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subscribers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// nowTime is the clock, in UTC, truncated to the microsecond that the
// database keeps.
func (s *Store) nowTime() time.Time {
	return time.UnixMicro(s.now().UnixMicro()).UTC()
}

func (s *Store) nowMicros() int64 { return s.now().UnixMicro() }

// fromMicros turns a stored time into a UTC time.Time; NULL is the zero time.
func fromMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}
