package postgres_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
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
	pool, _ := pgtest.Schema(t)
	store := postgres.New(pool, &postgres.Config{Now: storetest.NewClock().Now})
	t.Cleanup(store.Close)
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return store
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
		files, err := os.ReadDir("migration")
		if err != nil {
			t.Fatal(err)
		}
		if versions != len(files) {
			t.Fatalf("ferry_migration has %d rows, want one per migration, %d", versions, len(files))
		}
	})
}

func TestReceiptSubscribe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WakesOnNewEventsOnly", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		subCtx, cancel := context.WithCancel(ctx)
		signals, err := s.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		receive(t, s, "s", "e", "p")
		waitSignal(t, signals)
		receive(t, s, "s", "e", "p") // a duplicate wakes nobody
		select {
		case <-signals:
			t.Fatal("signal for a duplicate")
		case <-time.After(200 * time.Millisecond):
		}
		cancel()
		for range signals { // closes once ctx is done
		}
	})

	t.Run("SchemasDoNotWakeEachOther", func(t *testing.T) {
		t.Parallel()
		a, other := setup(t), setup(t)
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		signals, err := a.ReceiptSubscribe(subCtx)
		if err != nil {
			t.Fatal(err)
		}
		receive(t, other, "s", "e", "p")
		select {
		case <-signals:
			t.Fatal("signal from another schema")
		case <-time.After(200 * time.Millisecond):
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
		waitSignal(t, signals) // the reconnect signals once
		receive(t, s, "s", "e", "p")
		waitSignal(t, signals)
	})
}

func waitSignal(t *testing.T, signals <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-signals:
		if !ok {
			t.Fatal("signal channel closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no signal within 10s")
	}
}

func currentSchema(t *testing.T, s *postgres.Store) string {
	t.Helper()
	var schema string
	if err := s.Pool().QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	return schema
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
