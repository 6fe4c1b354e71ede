package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
)

// A pending migration whose DDL needs a lock another transaction holds
// waits at most the lock timeout for it, so the statements queued behind
// the waiting DDL (a plain SELECT here, receipts and claims in production)
// go on once it gives up rather than for as long as that transaction lasts.
// Migrate then fails with the cause and the fix, nothing changed, and
// succeeds once the holder ends.
func TestMigrateBoundsItsLockWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a ceiling only a hung wait reaches
	defer cancel()
	pool, schema := pgtest.Schema(t)
	s := postgres.New(pool, nil)
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// 006 pending again: it drops and recreates an index of ferry_event,
	// which takes ACCESS EXCLUSIVE on the table.
	if _, err := pool.Exec(ctx, "DELETE FROM ferry_migration WHERE version = 6"); err != nil {
		t.Fatal(err)
	}
	const tries = 3
	postgres.SetMigrateLockTimeout(s, time.Second, tries)

	holder, err := pgtest.PoolOn(t, schema, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background()) //nolint:errcheck // ends the holder if the test stops early
	if _, err := holder.Exec(ctx, "LOCK TABLE ferry_event IN ACCESS SHARE MODE"); err != nil {
		t.Fatal(err)
	}

	migrated := make(chan error, 1)
	go func() { migrated <- s.Migrate(ctx) }()
	for waiting := false; !waiting; {
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE relation = 'ferry_event'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted)`).Scan(&waiting)
		if err != nil {
			t.Fatalf("waiting for the migration to wait for its lock: %v", err)
		}
		select {
		case err := <-migrated:
			t.Fatalf("Migrate returned %v before it was seen waiting for its lock", err)
		case <-time.After(10 * time.Millisecond): // a poll's pace, well inside one lock wait
		}
	}

	// A reader arriving now queues behind the waiting DDL; it must finish
	// while the holder still holds its lock.
	var n int
	if err := pgtest.PoolOn(t, schema, nil).QueryRow(ctx, "SELECT count(*) FROM ferry_event").Scan(&n); err != nil {
		t.Fatalf("a SELECT behind the waiting migration: %v; want it to go on once the migration gives up", err)
	}

	err = <-migrated
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("Migrate beside a lock holder = %v; want the lock timeout (55P03) wrapped", err)
	}
	for _, want := range []string{"006_stats_due", "waited more than 1s", "pg_stat_activity", "3 times", "nothing was changed", "ferry migrate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Migrate's error %q does not say %q", err, want)
		}
	}
	t.Log(err)
	var applied bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM ferry_migration WHERE version = 6)").Scan(&applied); err != nil || applied {
		t.Errorf("006 recorded after a failed Migrate: %v, %v; want nothing changed", applied, err)
	}

	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate once the holder ended = %v", err)
	}
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM ferry_migration WHERE version = 6)").Scan(&applied); err != nil || !applied {
		t.Errorf("006 not recorded once the holder ended: %v, %v", applied, err)
	}
}

// Instances take turns on the advisory lock for as long as a migration
// takes, so the lock timeout bounds only the waits that follow it: a
// Migrate behind another still waits once it has waited many timeouts.
func TestMigrateWaitsItsTurnUnbounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a ceiling only a hung wait reaches
	defer cancel()
	pool, schema := pgtest.Schema(t)
	// Its own application_name tells this Migrate's wait from those of
	// tests beside it.
	s := postgres.New(pgtest.PoolOn(t, schema, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = schema }), nil)
	t.Cleanup(s.Close)
	postgres.SetMigrateLockTimeout(s, 50*time.Millisecond, 1)

	turn, err := pgtest.PoolOn(t, schema, nil).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Rollback(context.Background()) //nolint:errcheck // ends the turn if the test stops early
	if _, err := turn.Exec(ctx, postgres.MigrationLockSQL, pgx.NamedArgs{"class": postgres.MigrationLockClass}); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- s.Migrate(ctx) }()
	// The database's own clock says how long the Migrate has waited.
	for waited := false; !waited; {
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
			WHERE a.application_name = $1 AND l.locktype = 'advisory' AND NOT l.granted
			AND clock_timestamp() - a.query_start > interval '500 ms')`, schema).Scan(&waited)
		if err != nil {
			t.Fatalf("waiting for Migrate to wait its turn: %v", err)
		}
		select {
		case err := <-migrated:
			t.Fatalf("Migrate behind another = %v before its turn; want it to wait", err)
		case <-time.After(10 * time.Millisecond): // a poll's pace
		}
	}
	if err := turn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate on its turn = %v", err)
	}
}
