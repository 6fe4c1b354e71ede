// Package teststore opens real, migrated stores for tests: a SQLite file in
// the test's temporary directory, or a PostgreSQL schema of the test's own
// (internal/pgtest). Each store closes when the test ends.
package teststore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
	"github.com/ferry-inbox/ferry/storetest"
)

// SQLite returns a migrated store in a fresh file under t.TempDir().
// config may be nil.
func SQLite(t testing.TB, config *sqlite.Config) *sqlite.Store {
	t.Helper()
	return SQLiteAt(t, filepath.Join(t.TempDir(), "ferry.db"), config)
}

// SQLiteOnClock returns a migrated store in a fresh file under t.TempDir()
// whose time is a new storetest.Clock, and the clock, for a test that moves
// time by hand.
func SQLiteOnClock(t testing.TB) (*sqlite.Store, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	return SQLite(t, &sqlite.Config{Now: clock.Now}), clock
}

// SQLiteAt opens the store at path, creating the file if need be, and
// migrates it. config may be nil.
func SQLiteAt(t testing.TB, path string, config *sqlite.Config) *sqlite.Store {
	t.Helper()
	s := OpenSQLite(t, path, config)
	migrate(t, s.Migrate)
	return s
}

// OpenSQLite opens the store at path as it is, without migrating it, and
// closes it when the test ends. config may be nil.
func OpenSQLite(t testing.TB, path string, config *sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path, config)
	if err != nil {
		t.Fatalf("teststore: open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Postgres returns a migrated store in a fresh schema. config may be nil.
func Postgres(t testing.TB, config *postgres.Config) *postgres.Store {
	t.Helper()
	pool, _ := pgtest.Schema(t)
	return PostgresOn(t, pool, config)
}

// PostgresOn returns a migrated store on pool, for a test that needs the
// pool or the schema too (pgtest.Schema makes both). config may be nil.
func PostgresOn(t testing.TB, pool *pgxpool.Pool, config *postgres.Config) *postgres.Store {
	t.Helper()
	s := postgres.New(pool, config)
	t.Cleanup(s.Close)
	migrate(t, s.Migrate)
	return s
}

func migrate(t testing.TB, m func(context.Context) error) {
	t.Helper()
	if err := m(context.Background()); err != nil {
		t.Fatalf("teststore: migrate: %v", err)
	}
}
