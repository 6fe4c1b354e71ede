package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

// repeatableRead opens another pool on s's schema whose sessions default to
// repeatable read, as ALTER ROLE ... SET default_transaction_isolation
// leaves them, and a store on it with config.
func repeatableRead(t *testing.T, s *postgres.Store, config *postgres.Config) *postgres.Store {
	t.Helper()
	schema := s.Pool().Config().ConnConfig.RuntimeParams["search_path"]
	pool := pgtest.PoolOn(t, schema, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	})
	rr := postgres.New(pool, config)
	t.Cleanup(rr.Close)
	return rr
}

// showIsolation is the default_transaction_isolation of a session of pool.
func showIsolation(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var v string
	if err := pool.QueryRow(context.Background(), `SHOW default_transaction_isolation`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Open's sessions run read committed whatever the role sets (here a role of
// the test's own, set to repeatable read); a URL that sets another is
// refused, naming it, rather than opened to fail every Ping.
func TestOpenRunsReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)
	storeURL, _ := pgtest.Role(t, schema, "rr", `ALTER ROLE %s SET default_transaction_isolation = 'repeatable read'`)
	// The role's setting holds where nothing sets another.
	conn, err := pgx.Connect(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	var plain string
	err = conn.QueryRow(ctx, `SHOW default_transaction_isolation`).Scan(&plain)
	conn.Close(ctx)
	if err != nil || plain != "repeatable read" {
		t.Fatalf("the role's session runs %q (%v), want repeatable read: the test sets nothing", plain, err)
	}

	s, err := postgres.Open(ctx, storeURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := showIsolation(t, s.Pool()); got != "read committed" {
		t.Errorf("Open's session runs %q, want read committed", got)
	}

	// The URL's word is kept, so Open refuses it, naming the fix.
	kept, err := postgres.Open(ctx, storeURL+"&default_transaction_isolation=serializable", nil)
	if !errors.Is(err, ferry.ErrMisconfigured) || !strings.Contains(err.Error(), `"serializable"`) || !strings.Contains(err.Error(), "remove default_transaction_isolation from the URL") {
		t.Errorf("Open with serializable in the URL = %v, want ErrMisconfigured naming it and the fix", err)
	}
	if kept != nil {
		kept.Close()
	}
}

// InTx runs read committed on a pool whose sessions default to repeatable
// read: a transactional handler writes, a heartbeat renews its lease
// meanwhile, and its EventCompleteTx still commits. Under repeatable read
// the completion's lock on the event, which the heartbeat rewrote after the
// transaction's snapshot, fails with SQLSTATE 40001.
func TestInTxIsReadCommitted(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	rr := repeatableRead(t, b.store, &postgres.Config{Now: b.clock.Now})
	if _, err := b.store.Pool().Exec(b.ctx, `CREATE TABLE effect (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	lease := b.claimed(t, "e")
	err := rr.InTx(b.ctx, func(tx pgx.Tx) error {
		var iso string
		if err := tx.QueryRow(b.ctx, `SHOW transaction_isolation`).Scan(&iso); err != nil {
			return err
		}
		if iso != "read committed" {
			t.Errorf("InTx runs %q, want read committed", iso)
		}
		if _, err := tx.Exec(b.ctx, `INSERT INTO effect (key) VALUES ('e')`); err != nil {
			return err
		}
		if _, err := b.store.EventHeartbeat(b.ctx, &ferry.EventHeartbeatParams{Lease: lease, TTL: time.Hour}); err != nil {
			return err
		}
		return rr.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: lease})
	})
	if err != nil {
		t.Fatalf("a transactional handler's completion after a heartbeat: %v", err)
	}
	if ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: lease.ID}); err != nil || ev.State != ferry.StateDone {
		t.Fatalf("event after the handler: %+v, %v; want done", ev, err)
	}
}

// Ping fails on a pool whose sessions default to repeatable read, naming
// the setting and the fix; postgres.New sets nothing on the pool it is
// given, so only Ping (and so /readyz and doctor) can say.
func TestPingRefusesAnIsolationAboveReadCommitted(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	err := repeatableRead(t, b.store, &postgres.Config{Now: b.clock.Now}).Ping(b.ctx)
	if !errors.Is(err, ferry.ErrMisconfigured) {
		t.Fatalf("Ping on a repeatable read pool = %v, want ErrMisconfigured", err)
	}
	for _, want := range []string{`default_transaction_isolation = "repeatable read"`, "40001", "ALTER ROLE ... SET default_transaction_isolation = 'read committed'"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Ping's error %q does not say %q", err, want)
		}
	}
	if err := b.store.Ping(b.ctx); err != nil {
		t.Errorf("Ping on the read committed pool beside it = %v", err)
	}
}
