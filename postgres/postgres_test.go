package postgres_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/storetest"
)

// The store's lifecycle is tested by the shared contract (storetest_test.go);
// this file keeps what only PostgreSQL has: migrations, LISTEN/NOTIFY and the
// pool Open makes.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup returns a migrated store in a fresh schema, on a fake clock.
func setup(t testing.TB) *postgres.Store {
	t.Helper()
	return teststore.Postgres(t, &postgres.Config{Now: storetest.NewClock().Now})
}

func receive(t testing.TB, s *postgres.Store, source, eventID string, payload string) *ferry.EventReceiveResult {
	t.Helper()
	res, err := s.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ConcurrentAndRepeated", func(t *testing.T) {
		t.Parallel()
		pool, _ := pgtest.Schema(t)
		store := postgres.New(pool, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() { errs <- store.Migrate(ctx) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := store.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		var versions int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM ferry_migration").Scan(&versions); err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob("migration/*.sql")
		if err != nil {
			t.Fatal(err)
		}
		if versions != len(files) {
			t.Fatalf("ferry_migration has %d rows, want one per migration file (%d)", versions, len(files))
		}
	})
}

// MigratePlan during a Migrate waits for it, and plans from the schema it
// leaves: a plan read half way would tell `serve --no-migrate` that a
// migration the other instance has just applied is missing.
func TestMigratePlanWaitsForAMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Schema(t)
	// The store's sessions carry a name of their own, to find their waits.
	config, err := pgxpool.ParseConfig(pgtest.ConnString(schema))
	if err != nil {
		t.Fatal(err)
	}
	config.ConnConfig.RuntimeParams["application_name"] = schema
	storePool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		t.Fatal(err)
	}
	defer storePool.Close()
	store := postgres.New(storePool, nil)
	// A Migrate in progress: this transaction holds its lock, and a real
	// Migrate waits for it, as a second instance's would.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var holder int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, postgres.MigrationLockSQL, pgx.NamedArgs{"class": postgres.MigrationLockClass}); err != nil {
		t.Fatal(err)
	}
	// Waits until the store's session running the statement like waits
	// for holder.
	waiting := func(like, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE $2 AND application_name = $3`, holder, like, schema).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never waited for the migration lock", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	migrated := make(chan error, 1)
	go func() { migrated <- store.Migrate(ctx) }()
	waiting("%pg_advisory_xact_lock(%", "Migrate")
	type result struct {
		steps []ferry.MigrationStep
		err   error
	}
	planned := make(chan result, 1)
	go func() { steps, err := store.MigratePlan(ctx); planned <- result{steps, err} }()
	waiting("%pg_advisory_xact_lock_shared(%", "MigratePlan")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatal(err)
	}
	if r := <-planned; r.err != nil || len(r.steps) != 0 {
		t.Fatalf("MigratePlan during a Migrate = %+v, %v; want nothing pending once it is done", r.steps, r.err)
	}
}

// The migration lock is the schema's: a migration of one inbox (003 can
// take minutes) does not hold up serve's start, doctor or any command of an
// inbox in another schema of the database, which all read MigratePlan.
func TestMigrationLockIsTheSchemas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a ceiling only a wait on the other schema reaches
	defer cancel()
	busy, _ := pgtest.Schema(t)
	other, _ := pgtest.Schema(t)
	tx, err := busy.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // ends the hold if the test stops early
	if _, err := tx.Exec(ctx, postgres.MigrationLockSQL, pgx.NamedArgs{"class": postgres.MigrationLockClass}); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(other, nil)
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate beside another schema's migration = %v; want it done without waiting", err)
	}
	if steps, err := store.MigratePlan(ctx); err != nil || len(steps) != 0 {
		t.Fatalf("MigratePlan beside another schema's migration = %v, %v; want nothing pending", steps, err)
	}
}

// Exactly 003 needs older instances stopped: their workers would forward
// events whose completion its layout refuses. serve leaves it to `ferry
// migrate` on a store in use.
func TestOnlyTheArchiveMigrationIsExclusive(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.Schema(t)
	plan, err := postgres.New(pool, nil).MigratePlan(context.Background())
	if err != nil || len(plan) == 0 {
		t.Fatalf("MigratePlan = %+v, %v", plan, err)
	}
	var exclusive []int
	for _, step := range plan {
		if step.Exclusive != "" {
			exclusive = append(exclusive, step.Version)
		}
	}
	if !slices.Equal(exclusive, []int{3}) {
		t.Errorf("exclusive migrations = %v, want [3]", exclusive)
	}
}

// A migration that fills PostgreSQL's lock table says how to make room;
// any other failure is named and kept as it is.
func TestMigrationFailedSaysHowToFix(t *testing.T) {
	t.Parallel()
	m := ferry.Migration{Version: 3, Name: "archive"}
	full := &pgconn.PgError{Code: "53200", Message: "out of shared memory"}
	err := postgres.MigrationFailed(m, full)
	if !errors.Is(err, full) || !strings.HasPrefix(err.Error(), "migration 003_archive: ") || !strings.Contains(err.Error(), "raise max_locks_per_transaction") {
		t.Errorf("a full lock table = %v; want it named, wrapped and the fix", err)
	}
	other := &pgconn.PgError{Code: "42P07", Message: "relation exists"}
	if err := postgres.MigrationFailed(m, other); !errors.Is(err, other) || strings.Contains(err.Error(), "max_locks") {
		t.Errorf("another failure = %v; want it wrapped, without the lock table's fix", err)
	}
}

// Migration 005 marks the keys of events catch-up stored, wherever the
// event is kept: the file runs again here on keys set back to unmarked, as
// an installation at 004 has them.
func TestMigrationMarksCaughtUpKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.Schema(t)
	st := postgres.New(pool, nil)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id     string
		origin ferry.Origin
	}{{"evt_live", ferry.OriginCatchup}, {"evt_done", ferry.OriginCatchup}, {"evt_sent", ferry.OriginDelivery}} {
		if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: r.id, Payload: []byte(r.id), Origin: r.origin}); err != nil {
			t.Fatal(err)
		}
	}
	claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 10, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if c.Event.EventID == "evt_done" {
			if err := st.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	migration, err := os.ReadFile(filepath.Join("migration", "005_key_caught_up.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE ferry_event_key SET caught_up = false`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // and again: a second run must succeed
		if _, err := pool.Exec(ctx, string(migration)); err != nil {
			t.Fatal(err)
		}
	}
	rows, _ := pool.Query(ctx, `SELECT event_id FROM ferry_event_key WHERE caught_up ORDER BY event_id`)
	marked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(marked, []string{"evt_done", "evt_live"}) {
		t.Fatalf("marked keys %v, want evt_done (archived) and evt_live", marked)
	}
}

// A URL Open cannot use is ErrInvalidParams (ferry serve: exit 2 naming
// store.url), with pgx's reason and never the password.
func TestOpenRefusesAURLItCannotUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, reason string }{
		{"port", "postgres://ferry:SEKRET@127.0.0.1:notaport/ferry", "invalid port"},
		{"sslmode", "postgres://ferry:SEKRET@127.0.0.1:5432/ferry?sslmode=bogus", "sslmode is invalid"},
		{"password encoding", "postgres://ferry:SEK%zzRET@127.0.0.1:5432/ferry", "invalid percent-encoded token in password"},
		{"database encoding", "postgres://ferry:SEKRET@127.0.0.1:5432/fe%zz", "invalid percent-encoded token"},
		{"password in the query", "postgresql://ferry@127.0.0.1/ferry?password=SEKRET&sslmode=bogus", "sslmode is invalid"},
		{"password with a backquote", "postgres://ferry:SEK`: RET@127.0.0.1:x/ferry", "does not parse"},
		// Without its "@" the password reads as a port: pgx's own message
		// quotes it whole.
		{"password without its @", "postgres://ferry:SEKRET/ferry", "invalid port"},
		// With an '@' of its own it parses, into the host a failed
		// connection prints.
		{"password with an @", "postgres://ferry:SEK@RET@127.0.0.1/ferry", "holds an '@'"},
		{"pool setting", "postgres://ferry:SEKRET@127.0.0.1/ferry?pool_max_conns=many", "pool_max_conns"},
		// What pgx quotes of the URL in its reasons is cut out.
		{"quoted spaces", "postgres://u:SEK RET@127.0.0.1:1/db", "unexpected spaces"},
		{"quoted host", "postgres://u:SEKRET@127.0.0.1:1:2/db", "invalid port"},
		{"a quote in the password", `postgres://u:ab/c"SEK RET@127.0.0.1:1/db`, "does not parse"},
		{"a backquote in the password", "postgres://u:ab/x`: SEK RET@127.0.0.1:1/db", "does not parse"},
		{"quoted query", "postgres://u@127.0.0.1:1/db?password=SEK&SEKRET", "key/value separator"},
		// A '?' in the password must not hide its '@' from the check, and
		// a '/' in it must not pass its rest as the database name.
		{"password with ? and @", "postgres://u:S?E@SEKRET@127.0.0.1:1/db", "holds an '@'"},
		{"password with a /", "postgres://u:123/SEKRET@127.0.0.1:1/db", "holds an '@'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := postgres.Open(context.Background(), tc.url, nil)
			if !errors.Is(err, ferry.ErrInvalidParams) || !strings.Contains(err.Error(), tc.reason) || strings.Contains(err.Error(), "SEK") {
				t.Fatalf("Open = %v; want ErrInvalidParams naming %q, and no password", err, tc.reason)
			}
		})
	}
}

// URLs with an '@' where it belongs, in the query, are not refused (the
// closed port fails the connection instead).
func TestOpenTakesAnAtInTheQuery(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"postgres://u:p@127.0.0.1:1/db?application_name=a@b&connect_timeout=5",
		"postgres://u:p@127.0.0.1:1?application_name=/x@y&connect_timeout=5",
		"postgres://u:p%40ss@127.0.0.1:1/db?connect_timeout=5",
		"postgres://u:p@%2Ftmp%2Fno-pg%4015/db?connect_timeout=5", // a socket's folder
	} {
		if _, err := postgres.Open(context.Background(), url, nil); err == nil || errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("Open(%s) = %v; want a connection error", url, err)
		}
	}
}

func TestReceiptSubscribe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Absences are proven by order, not by waiting: a listener gets
	// notifications in commit order, so when a marker sent after the
	// changes is the first thing it sees, the changes sent nothing.
	t.Run("OnlyClaimableChangesNotify", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		listener := listen(t, s)
		receive(t, s, "s", "done", "p")
		receive(t, s, "s", "dead", "p")
		receive(t, s, "s", "dead_many", "p")
		wantNotified(t, listener, "") // the first receipt's; the others coalesce or follow
		wantMarkerFirst(t, s, listener, true)

		// Every change of the contract's NothingElseWakes, one by one.
		receive(t, s, "s", "done", "p") // a duplicate
		claims, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 3, TTL: time.Minute})
		if err != nil || len(claims) != 3 {
			t.Fatalf("claim = %d, %v", len(claims), err)
		}
		for _, c := range claims {
			if _, err := s.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: c.Event.Lease(), TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{c.Event.Lease()}, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: claims[1].Event.Lease(), Dead: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: claims[2].Event.Lease(), Dead: true}}}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{Source: "github", Actor: "op"}); err != nil || n != 0 {
			t.Fatalf("requeue of nothing = %d, %v", n, err)
		}
		wantMarkerFirst(t, s, listener, false)
	})

	t.Run("SchemasDoNotWakeEachOther", func(t *testing.T) {
		t.Parallel()
		a, other := setup(t), setup(t)
		listener := listen(t, a)
		receive(t, other, "s", "e", "p")
		wantMarkerFirst(t, a, listener, false)
	})

	t.Run("ClosesWhenCtxIsDone", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		subCtx, cancel := context.WithCancel(ctx)
		signals, err := s.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		for range signals { // closes once ctx is done
		}
	})

	t.Run("ReconnectsAfterTheConnectionDies", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		signals, err := s.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		var channel string
		if err := s.Pool().QueryRow(ctx, "SELECT ferry_receipt_channel()").Scan(&channel); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx,
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'", channel); err != nil {
			t.Fatal(err)
		}
		storetest.WaitWake(t, signals) // the reconnect signals once
		receive(t, s, "s", "e", "p")
		storetest.WaitWake(t, signals)
	})
}

// listen opens a connection of the test's own that LISTENs on s's receipt
// channel, to see each notification as PostgreSQL sends it.
func listen(t *testing.T, s *postgres.Store) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, s.Pool().Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{receiptChannel(t, s)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// queryText returns the one text value query selects on s's pool.
func queryText(t *testing.T, s *postgres.Store, query string) string {
	t.Helper()
	var text string
	if err := s.Pool().QueryRow(context.Background(), query).Scan(&text); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return text
}

func receiptChannel(t *testing.T, s *postgres.Store) string {
	return queryText(t, s, "SELECT ferry_receipt_channel()")
}

// wantNotified waits (up to a ceiling) for the next notification and
// checks its payload.
func wantNotified(t *testing.T, conn *pgx.Conn, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	if n.Payload != payload {
		t.Fatalf("notification %q, want %q", n.Payload, payload)
	}
}

// wantMarkerFirst sends a marker on s's channel and checks that it is the
// next notification the listener gets; skipStore lets store notifications
// still in flight from earlier changes go first.
func wantMarkerFirst(t *testing.T, s *postgres.Store, conn *pgx.Conn, skipStore bool) {
	t.Helper()
	if _, err := s.Pool().Exec(context.Background(), "SELECT pg_notify($1, 'marker')", receiptChannel(t, s)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("marker not received: %v", err)
		}
		if n.Payload == "marker" {
			return
		}
		if !skipStore {
			t.Fatalf("a notification (%q) came before the marker: a change that should not wake did", n.Payload)
		}
	}
}

func currentSchema(t *testing.T, s *postgres.Store) string {
	return queryText(t, s, "SELECT current_schema()")
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)

	store, err := postgres.Open(ctx, pgtest.ConnString(schema), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := currentSchema(t, store); got != schema {
		t.Fatalf("schema = %q, want %q", got, schema)
	}
	signals, err := store.ReceiptSubscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.Close() // stops the subscription and closes the pool Open made
	for range signals {
	}
	if err := store.Pool().Ping(ctx); err == nil {
		t.Fatal("pool still open after Close")
	}
}

// EventStats lists sources in byte order, as SQLite and Go sort, whatever
// the database's collation: the schema's source columns take a
// language-aware one here, as on a database created for en-US (the test
// database is C.UTF-8, where the contract's SourcesSortedByName cannot
// tell the two apart).
func TestStatsSourcesInByteOrderUnderICU(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	pool := s.Pool()
	rows, _ := pool.Query(ctx, `
		SELECT c.relname FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE a.attname = 'source' AND n.nspname = current_schema()
		  AND c.relkind IN ('r', 'p') AND NOT c.relispartition`)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("tables with a source column: %v, %v", tables, err)
	}
	for _, table := range tables {
		if _, err := pool.Exec(ctx, `ALTER TABLE `+pgx.Identifier{table}.Sanitize()+` ALTER COLUMN source TYPE text COLLATE "en-US-x-icu"`); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
	}
	names := []string{"a", "B", "a-c", "ab", "Z"}
	for _, n := range names {
		if _, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: n, EventID: "e", Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := s.EventStats(ctx, &ferry.EventStatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, src := range stats.Sources {
		got = append(got, src.Source)
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("sources = %q, want byte order %q", got, names)
	}
}

// An instance older than 009, running beside a newer one that migrated the
// store (a rolling upgrade), claims by ferry_event_pending_due: with the
// index gone each of its claims would sort every pending event of its
// sources.
func TestOlderClaimsIndexStays(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var n int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'ferry_event_pending_due'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("ferry_event_pending_due after Migrate: %d, %v; want it kept for older instances", n, err)
	}
}

// A migration that landed is never edited: a store that applied it records
// its version only, and would keep the old text while Migrate calls it up to
// date. 003 was, in place, while on main; stores migrated then lack what
// today's code needs.
func TestMigrationsUnchanged(t *testing.T) {
	t.Parallel()
	storetest.MigrationsUnchanged(t, os.DirFS("."), "migration", map[int]string{
		1:  "e5d6cfb2fd367b0cdc5161c66f2d0c83376df5c8efea35caa9c8509557cef71f",
		2:  "ac25988493e82b89fdc7e7d04b4e2810c9d4897ca92b1ec0ee8acec08c63e233",
		3:  "10da536b931a78ca611ee0e2eac7b27ac7121c2a5e884c4fd61f26e4d3a95d4a",
		4:  "6cacfbb1ab5521f25d68d1b16c67c6c32c4b345e5a948bf11063f620972d964b",
		5:  "a141084f13fc6d01375a1481232a0dcff6fa2360e167fc9a1c1c70e708226cb0",
		6:  "d6af204f4762d377491517f035fd58a547890fd7d4a948050b8344116ff87209",
		7:  "593705df239590753350cf6dffaa07023230f3faded8608675ff1cde1c6f0981",
		8:  "0297ccfce90f7d5a562e33c6bed484067f9737677d6107514f88fbb723b39fe0",
		9:  "e9df8859250781ba5ca9a2d999b6474ffad353edbb589768f13ca2afc9850218",
		10: "747ca0daf2dcfc7504ca01990688fd84ba0ae91a642d2326e6c6f2c4060261ba",
		11: "9fd903da82c7aaa72e85ac00cecb4fc21b3a684d161f90edd23200c4a529e071",
		12: "13b5df155397d53cae9e626de6988bb10bc74d1fa5fa1f60345d63c6a9e4c322",
	})
}
