package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/sqlite"
	"github.com/ferry-inbox/ferry/storetest"
)

// The store's lifecycle is tested by the shared contract (storetest_test.go);
// this file keeps what only SQLite has: the file and its pragmas, migrations,
// a full disk, microsecond times and in-process signals.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ttl = 30 * time.Second

type testBundle struct {
	store *sqlite.Store
	clock *storetest.Clock
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupConfig(t, &sqlite.Config{})
}

func setupConfig(t *testing.T, config *sqlite.Config) *testBundle {
	t.Helper()
	clock := storetest.NewClock()
	clock.Advance(123456789 * time.Nanosecond) // finer than the microsecond SQLite keeps
	config.Now = clock.Now
	return &testBundle{store: teststore.SQLite(t, config), clock: clock}
}

func (b *testBundle) receive(t *testing.T, source, eventID string) int64 {
	t.Helper()
	res, err := b.store.EventReceive(t.Context(), &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte(eventID)})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func (b *testBundle) claim(t *testing.T) ferry.Lease {
	t.Helper()
	claims, err := b.store.EventClaimMany(t.Context(), &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: ttl})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claimed %d events, %v; want 1", len(claims), err)
	}
	return claims[0].Event.Lease()
}

func (b *testBundle) get(t *testing.T, id int64) *ferry.Event {
	t.Helper()
	e, err := b.store.EventGet(t.Context(), &ferry.EventGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A receipt's time is the store's clock once it holds the write lock, not
// when it was asked: one that waited behind another write is not stamped
// earlier than what committed before it, nor judged for replays at that
// earlier time.
func TestReceiptTimeIsReadUnderTheWriteLock(t *testing.T) {
	t.Parallel()
	for name, receive := range map[string]func(*sqlite.Store, *ferry.EventReceiveParams) error{
		"One": func(st *sqlite.Store, p *ferry.EventReceiveParams) error {
			_, err := st.EventReceive(context.Background(), p)
			return err
		},
		"Many": func(st *sqlite.Store, p *ferry.EventReceiveParams) error {
			res, err := st.EventReceiveMany(context.Background(), &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{p, {Source: "stripe", EventID: "evt_2"}}})
			if err == nil {
				err = errors.Join(res[0].Err, res[1].Err)
			}
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			tx, err := b.store.DB().BeginTx(context.Background(), nil) // the write connection
			if err != nil {
				t.Fatal(err)
			}
			waits := b.store.DB().Stats().WaitCount
			done := make(chan error, 1)
			go func() { done <- receive(b.store, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1"}) }()
			for deadline := time.Now().Add(30 * time.Second); b.store.DB().Stats().WaitCount == waits; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the receipt never waited for the write connection")
				}
			}
			b.clock.Advance(time.Minute)
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			ev, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_1"})
			if err != nil {
				t.Fatal(err)
			}
			if want := b.clock.Now().Truncate(time.Microsecond); !ev.FirstDeliveredAt.Equal(want) || !ev.NextAttemptAt.Equal(want) {
				t.Errorf("first delivered %v, due %v; want the time it got the lock, %v", ev.FirstDeliveredAt, ev.NextAttemptAt, want)
			}
		})
	}
}

// Readiness never waits behind a write: with the write connection held,
// Ping answers from the read pool.
func TestPingDoesNotWaitForWriters(t *testing.T) {
	t.Parallel()
	st := teststore.SQLite(t, nil)
	tx, err := st.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waits := st.DB().Stats().WaitCount
	start := time.Now()
	if err := st.Ping(ctx); err != nil {
		t.Errorf("Ping beside an open write transaction = %v, want nil", err)
	}
	if st.DB().Stats().WaitCount != waits {
		t.Error("Ping waited for the write connection")
	}
	if waited := time.Since(start); waited > 20*time.Second { // a ceiling only a wait for the writer reaches
		t.Errorf("Ping waited %v for the writer", waited)
	}
}

// wantOpenRefused checks that Open(dsn, config) fails with an error that is
// target and says want.
func wantOpenRefused(t *testing.T, dsn string, config *sqlite.Config, target error, want string) {
	t.Helper()
	s, err := sqlite.Open(dsn, config)
	if !errors.Is(err, target) || !strings.Contains(err.Error(), want) {
		t.Errorf("Open(%q) = %v, want %v saying %q", dsn, err, target, want)
	}
	if err == nil {
		s.Close()
	}
}

// wantOpens checks that Open(dsn, config) succeeds, and closes the store.
func wantOpens(t *testing.T, dsn string, config *sqlite.Config) {
	t.Helper()
	s, err := sqlite.Open(dsn, config)
	if err != nil {
		t.Fatalf("Open(%q) = %v", dsn, err)
	}
	s.Close()
}

func TestOpen(t *testing.T) {
	t.Parallel()

	// MustExist refuses a missing file, by path or URI, and creates none.
	t.Run("MustExist", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "ferry.db")
		mustExist := &sqlite.Config{MustExist: true}
		for _, dsn := range []string{path, "file:" + path + "?_pragma=busy_timeout(1000)", "file://" + path} {
			wantOpenRefused(t, dsn, mustExist, fs.ErrNotExist, "")
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a refused Open left a file behind: %v", err)
		}
		// No Open could make a file in a directory that is not there.
		wantOpenRefused(t, filepath.Join(dir, "no", "ferry.db"), mustExist, ferry.ErrInvalidParams, "does not exist: create it")
		wantOpens(t, path, nil)
		for _, dsn := range []string{path, "file:" + path + "?_pragma=busy_timeout(1000)", "file://" + path, "file://localhost" + path, "file:" + path + "#x"} {
			wantOpens(t, dsn, mustExist)
		}
	})

	t.Run("RefusesWhatIsNotDurable", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for path, want := range map[string]string{
			"":                           "name a file",
			":memory:":                   "in memory",
			"file:x?mode=memory":         "in memory",
			"file::memory:?cache=shared": "in memory",
			"file:/ferry.db?vfs=memdb":   "in memory",
			"file:" + filepath.Join(dir, "a.db") + "?_sync=OFF":                   "synchronous is 0",
			"file:" + filepath.Join(dir, "b.db") + "?_pragma=synchronous(NORMAL)": "synchronous is 1",
			"file:" + filepath.Join(dir, "c.db") + "?_journal_mode=MEMORY":        "journal_mode is memory",
			"file:" + filepath.Join(dir, "e.db") + "?_journal_mode=OFF":           "journal_mode is off",
			// The driver runs a _pragma on each pool's every connection; the
			// writer's, sorted before Ferry's journal_mode(WAL), reads back
			// WAL, and a reader's would switch the file out of it later.
			filepath.Join(dir, "g.db") + "?_pragma=journal_mode(MEMORY)":           "journal_mode is memory",
			filepath.Join(dir, "h.db") + "?_pragma=main.synchronous%3D1":           "synchronous is 1",
			filepath.Join(dir, "i.db") + "?_pragma=synchronous(FULL)&_sync=NORMAL": "synchronous is 1",
			filepath.Join(dir, "s.db") + "?_pragma=fullfsync(0)":                   "fullfsync is 0",
			filepath.Join(dir, "t.db") + "?_pragma=fullfsync%3Doff":                "fullfsync is off",
		} {
			wantOpenRefused(t, path, nil, ferry.ErrNotDurable, want)
		}
		// Locks that make connections fail instead of taking turns.
		for path, want := range map[string]string{
			filepath.Join(dir, "p.db") + "?_pragma=locking_mode(EXCLUSIVE)": "remove the path's locking_mode",
			filepath.Join(dir, "q.db") + "?_pragma=busy_timeout(0)":         "busy_timeout is 0 ms",
			filepath.Join(dir, "r.db") + "?_pragma=busy_timeout%3D999":      "busy_timeout is 999 ms",
		} {
			wantOpenRefused(t, path, nil, ferry.ErrInvalidParams, want)
		}
		// Writes that begin deferred would fail on another process's commit.
		for _, path := range []string{filepath.Join(dir, "m.db") + "?_txlock=deferred", filepath.Join(dir, "n.db") + "?_txlock=DEFERRED"} {
			wantOpenRefused(t, path, nil, ferry.ErrInvalidParams, "remove the path's _txlock")
		}
		// Durable, but not WAL, which the read pool needs.
		for _, path := range []string{
			"file:" + filepath.Join(dir, "f.db") + "?_journal_mode=DELETE",
			filepath.Join(dir, "j.db") + "?_pragma=journal_mode(DELETE)",
			filepath.Join(dir, "k.db") + "?_pragma=" + url.QueryEscape("main.journal_mode = 'truncate'"),
		} {
			wantOpenRefused(t, path, nil, ferry.ErrInvalidParams, "not WAL")
		}
		// What keeps WAL and FULL is accepted.
		path := filepath.Join(dir, "l.db") + "?_pragma=journal_mode(wal)&_pragma=synchronous%3Dextra&_sync=FULL&_txlock=IMMEDIATE&_pragma=fullfsync(2)"
		wantOpens(t, path, nil)
	})

	// A path the store cannot use is ErrInvalidParams with the fix, not
	// the driver's bare "unable to open database file".
	t.Run("RefusesAPathItCannotUse", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		notDB := filepath.Join(dir, "notes.txt")
		if err := os.WriteFile(notDB, []byte("not a database, just some text that is long enough"), 0o600); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{
			filepath.Join(dir, "no", "such", "x.db"):                  "the directory " + filepath.Join(dir, "no", "such") + " does not exist: create it",
			"file:" + filepath.Join(dir, "gone", "x.db") + "?_sync=2": "the directory " + filepath.Join(dir, "gone") + " does not exist",
			dir:   "is a directory: name a file in it, like " + filepath.Join(dir, "ferry.db"),
			notDB: "not a SQLite database: fix the path",
			filepath.Join(dir, "q.db") + "?_pragma=query_only(1)":     "query_only is on",
			filepath.Join(dir, "r.db") + "?_pragma=query_only%3Dtrue": "query_only is on",
		} {
			wantOpenRefused(t, path, nil, ferry.ErrInvalidParams, want)
		}
	})

	t.Run("PragmasPerConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for pragma, want := range map[string]string{
			"journal_mode": "wal", "synchronous": "2", "fullfsync": "1", "foreign_keys": "1", "busy_timeout": "5000",
		} {
			var got string
			if err := b.store.DB().QueryRow("PRAGMA " + pragma).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
			}
		}
	})

	t.Run("FileDSN", func(t *testing.T) {
		t.Parallel()
		path := "file:" + filepath.Join(t.TempDir(), "ferry.db") + "?cache=private"
		store, err := sqlite.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if err := store.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("Idempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.store.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := b.store.DB().QueryRow("SELECT count(*) FROM ferry_migration").Scan(&n); err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob("migration/*.sql")
		if err != nil {
			t.Fatal(err)
		}
		if n != len(files) {
			t.Errorf("ferry_migration rows = %d, want one per migration file (%d)", n, len(files))
		}
	})

	// heldByAnother opens a store whose busy timeout is 1 s on a file
	// whose write lock another process's transaction holds until commit.
	heldByAnother := func(t *testing.T) (store *sqlite.Store, commit func()) {
		path := filepath.Join(t.TempDir(), "ferry.db")
		holder, err := sqlite.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { holder.Close() })
		store, err = sqlite.Open("file:"+path+"?_pragma=busy_timeout(1000)", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		tx, err := holder.DB().BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		if _, err := tx.ExecContext(t.Context(), `CREATE TABLE held (x)`); err != nil {
			t.Fatal(err)
		}
		return store, func() {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Another process holding the write lock past the busy timeout (its
	// migration building an index over a large store) delays Migrate; it
	// does not fail it.
	t.Run("WaitsPastTheBusyTimeout", func(t *testing.T) {
		t.Parallel()
		store, commit := heldByAnother(t)
		done := make(chan error, 1)
		go func() { done <- store.Migrate(t.Context()) }()
		time.Sleep(2500 * time.Millisecond) // past store's 1 s busy timeout, twice
		commit()
		if err := <-done; err != nil {
			t.Errorf("Migrate behind a lock held past the busy timeout: %v", err)
		}
	})

	// A lock held for good (a sqlite3 shell left inside BEGIN) fails
	// Migrate once its bound has passed, saying why, with nothing changed.
	t.Run("GivesUpOnALockHeldForGood", func(t *testing.T) {
		t.Parallel()
		store, _ := heldByAnother(t)
		sqlite.SetMigrateBusyLimit(store, 1500*time.Millisecond)
		err := store.Migrate(t.Context())
		if err == nil || !strings.Contains(err.Error(), "for the write lock another process holds") || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("Migrate behind a lock held for good: %v, want it to give up saying why", err)
		}
		if plan, err := store.MigratePlan(t.Context()); err != nil || len(plan) == 0 {
			t.Errorf("MigratePlan after giving up = %d steps, %v; want every migration still to apply", len(plan), err)
		}
	})

	t.Run("ConcurrentProcesses", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ferry.db")
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				store, err := sqlite.Open(path, nil)
				if err != nil {
					errs <- err
					return
				}
				defer store.Close()
				errs <- store.Migrate(t.Context())
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
}

// No SQLite migration needs older instances stopped: serve applies them
// all on its own (every one only adds).
func TestNoMigrationIsExclusive(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ferry.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	plan, err := st.MigratePlan(context.Background())
	if err != nil || len(plan) == 0 {
		t.Fatalf("MigratePlan = %+v, %v", plan, err)
	}
	for _, step := range plan {
		if step.Exclusive != "" {
			t.Errorf("migration %03d_%s is exclusive (%s); want none", step.Version, step.Name, step.Exclusive)
		}
	}
}

func TestDiskFullLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setupConfig(t, &sqlite.Config{MaxPageCount: 40})
	big := []byte(strings.Repeat("x", 16<<10))
	var err error
	var stored int
	for i := range 100 {
		_, err = b.store.EventReceive(t.Context(), &ferry.EventReceiveParams{
			Source: "s", EventID: fmt.Sprint(i), Payload: big,
		})
		if err != nil {
			break
		}
		stored++
	}
	if err == nil {
		t.Fatal("no error from a full database")
	}
	list, lerr := b.store.EventList(t.Context(), &ferry.EventListParams{Limit: 1000})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(list.Events) != stored {
		t.Errorf("%d events listed, %d acknowledged: a failed receive left a row", len(list.Events), stored)
	}
}

// A full disk can make SQLite roll a whole transaction back, not just the
// statement that failed, without database/sql knowing: each later
// statement of tx then commits on its own. A handler that goes on past such
// an error must not get its event marked done beside writes that are gone.
func TestCompleteTxRefusesATransactionSQLiteRolledBack(t *testing.T) {
	t.Parallel()
	b := setupConfig(t, &sqlite.Config{MaxPageCount: 60})
	ctx := t.Context()
	if _, err := b.store.DB().ExecContext(ctx, `CREATE TABLE effect (k TEXT, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	id := b.receive(t, "s", "e-1")
	lease := b.claim(t)
	var fullErr error
	err := b.store.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO effect VALUES ('first', 'x')`); err != nil {
			return err
		}
		_, fullErr = tx.ExecContext(ctx, `INSERT INTO effect VALUES ('big', ?)`, bytes.Repeat([]byte("y"), 1<<20))
		return b.store.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: lease})
	})
	if fullErr == nil {
		t.Fatal("the 1 MiB insert fit: the database is not full, so this tests nothing")
	}
	if !errors.Is(err, ferry.ErrTxDone) {
		t.Errorf("InTx = %v, want ErrTxDone", err)
	}
	var effects int
	if err := b.store.DB().QueryRowContext(ctx, `SELECT count(*) FROM effect`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if e := b.get(t, id); e.State == ferry.StateDone {
		t.Errorf("event done beside %d of the handler's writes: its transaction was rolled back before the completion", effects)
	}
	// The one write connection is not left in a transaction.
	if _, err := b.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: ttl}); err != nil {
		t.Errorf("heartbeat after the refused completion: %v", err)
	}
}

// TestTimesKeepMicroseconds: SQLite stores times as UTC microseconds, so
// every time the store hands back is the clock truncated to the microsecond.
func TestTimesKeepMicroseconds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	now := func() time.Time { return b.clock.Now().Truncate(time.Microsecond) }
	id := b.receive(t, "github", "d-1")
	e := b.get(t, id)
	if e.FirstDeliveredAt.Location() != time.UTC || !e.FirstDeliveredAt.Equal(now()) || !e.NextAttemptAt.Equal(e.FirstDeliveredAt) {
		t.Errorf("times = %v, %v; want the clock to the microsecond, UTC", e.FirstDeliveredAt, e.NextAttemptAt)
	}

	b.clock.Advance(time.Millisecond)
	lease := b.claim(t)
	e = b.get(t, id)
	if !e.ClaimedAt.Equal(now()) || !e.LeaseExpiresAt.Equal(now().Add(ttl)) {
		t.Errorf("claimed %v, expires %v; want %v and %v", e.ClaimedAt, e.LeaseExpiresAt, now(), now().Add(ttl))
	}
	b.clock.Advance(time.Second)
	expires, err := b.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if want := now().Add(ttl); !expires.Equal(want) || !b.get(t, id).LeaseExpiresAt.Equal(want) {
		t.Errorf("heartbeat expiry = %v, want %v", expires, want)
	}
	b.clock.Advance(time.Second)
	if _, err := b.store.EventFail(ctx, &ferry.EventFailParams{Lease: lease, RetryDelay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if e := b.get(t, id); !e.NextAttemptAt.Equal(now().Add(time.Minute)) {
		t.Errorf("next attempt at %v, want %v", e.NextAttemptAt, now().Add(time.Minute))
	}
	b.clock.Advance(time.Minute)
	started := now()
	lease = b.claim(t)
	b.clock.Advance(time.Second)
	if err := b.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if e := b.get(t, id); !e.CompletedAt.Equal(now()) {
		t.Errorf("completed at %v, want %v", e.CompletedAt, now())
	}
	a, err := b.store.AttemptList(ctx, &ferry.AttemptListParams{ID: id})
	if err != nil || len(a) != 2 {
		t.Fatalf("ledger = %+v, %v", a, err)
	}
	if !a[1].StartedAt.Equal(started) || !a[1].FinishedAt.Equal(now()) {
		t.Errorf("attempt 2 ran %v to %v, want %v to %v", a[1].StartedAt, a[1].FinishedAt, started, now())
	}
}

// TestReceiptSubscribe: signals are in-process and sent before the write
// returns, so each check reads the channel without waiting. A receipt, a
// requeue and a release wake; a duplicate does not.
func TestReceiptSubscribe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := b.store.ReceiptSubscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	signalled := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	b.receive(t, "s", "1")
	if !signalled() {
		t.Error("no signal after a receipt")
	}
	b.receive(t, "s", "1") // a duplicate makes nothing due
	if signalled() {
		t.Error("signal after a duplicate")
	}
	lease := b.claim(t)
	if err := b.store.EventRelease(t.Context(), &ferry.EventReleaseParams{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if !signalled() {
		t.Error("no signal after a release")
	}
	cancel()
	for range ch { // closes once ctx is done
	}
}

// A panicking transactional handler must not keep the only write connection:
// InTx rolls back and re-panics, and the next write goes through.
func TestInTxPanicReleasesTheWriter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("InTx swallowed the panic")
			}
		}()
		_ = b.store.InTx(t.Context(), func(tx *sql.Tx) error { panic("handler bug") })
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, err := b.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "after-panic"}); err != nil {
		t.Fatalf("write after a panicking InTx: %v", err)
	}
}

// An instance older than 004, running beside a newer one that migrated the
// file (a rolling upgrade), claims with INDEXED BY ferry_event_pending_due:
// with the index gone its every claim would fail.
func TestOlderClaimsIndexStays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var n int
	if err := b.store.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'ferry_event_pending_due'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("ferry_event_pending_due after Migrate: %d, %v; want it kept for older instances", n, err)
	}
}

// A migration that landed is never edited: a store that applied it records
// its version only, and would keep the old text while Migrate calls it up to
// date.
func TestMigrationsUnchanged(t *testing.T) {
	t.Parallel()
	storetest.MigrationsUnchanged(t, os.DirFS("."), "migration", map[int]string{
		1: "e3d3079a5235fac43ea3f10a031433e467433fb71c13018cbb30c8953c3c7785",
		2: "95a2d8082b2f2d40c5635cbe0e9e558c1faeb919290c0c36499499725dbfb0cd",
		3: "68f38094990169021756bb3b2925371c08a48adf67c630bde47c18d2dc25014c",
		4: "e9df8859250781ba5ca9a2d999b6474ffad353edbb589768f13ca2afc9850218",
	})
}

// Open reads back synchronous, fullfsync and journal_mode after the driver applied
// the path's query: whatever set them below FULL or off WAL, by a spelling
// the query check missed, the read-back refuses. Here the connection is
// set by hand, past any query check.
func TestDurableReadsBackTheSettings(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]error{
		"PRAGMA synchronous = FULL":    nil,
		"PRAGMA synchronous = OFF":     ferry.ErrNotDurable,
		"PRAGMA synchronous = NORMAL":  ferry.ErrNotDurable,
		"PRAGMA fullfsync = 0":         ferry.ErrNotDurable,
		"PRAGMA journal_mode = DELETE": ferry.ErrInvalidParams, // readers need WAL
	} {
		db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "ferry.db"))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1) // the settings are the connection's
		for _, stmt := range []string{"PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL", "PRAGMA fullfsync = 1", setting} {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		if err := sqlite.Durable(db); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("after %s: %v, want %v", setting, err, want)
		}
		db.Close()
	}
}
