// Package pgtest gives each test its own schema on a real PostgreSQL, so
// tests that must commit can run in parallel without seeing each other.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the server tests use when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// connectTimeout bounds the one reachability check. A missing local server
// refuses at once; the ceiling is for one that answers slowly under load,
// whose every test a short bound would fail (or skip) as unreachable.
const connectTimeout = 30 * time.Second

var (
	reachOnce sync.Once
	reachErr  error
)

// URL returns TEST_DATABASE_URL, or DefaultURL when it is unset.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Schema creates a fresh schema (ferry_test_<hex>) and returns a pool whose
// every connection, LISTEN ones included, has it as search_path, and the
// schema's name. t.Cleanup closes the pool and drops the schema.
//
// When no server answers, Schema fails the test under CI=true and skips it
// otherwise.
func Schema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	requireServer(t)

	ctx := context.Background()
	schema := "ferry_test_" + randomHex(t)
	if err := adminExec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := adminExec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return PoolOn(t, schema, nil), schema
}

// SchemaURL creates a fresh schema as Schema does and returns its
// ConnString, for tests that open their own pool or store on it.
func SchemaURL(t testing.TB) string {
	t.Helper()
	_, schema := Schema(t)
	return ConnString(schema)
}

// PoolOn opens another pool whose every connection has schema as
// search_path, after configure (when not nil) has adjusted its config: a
// larger pool, or one with other session settings. t.Cleanup closes it.
func PoolOn(t testing.TB, schema string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	config, err := pgxpool.ParseConfig(URL())
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", URL(), err)
	}
	config.ConnConfig.RuntimeParams["search_path"] = schema
	if configure != nil {
		configure(config)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), config)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the schema's drop: cleanups run last in, first out
	return pool
}

// ConnString returns URL() with schema as search_path, for child processes
// that must see the same tables as the test.
func ConnString(schema string) string {
	u, err := url.Parse(URL())
	if err != nil || u.Scheme == "" {
		// A key=value connection string: append the option.
		return URL() + " options='-c search_path=" + schema + "'"
	}
	q := u.Query()
	q.Set("options", "-c search_path="+schema)
	// libpq reads "+" literally, so spaces must be %20.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// Role creates a login role of the test's own for schema (named
// ferry_test_<what>_ and the schema's suffix), runs each of setup as the
// URL()'s user with the role's name for %s ("GRANT USAGE ON SCHEMA x TO
// %s"), and returns ConnString(schema) as that role, and the role.
// t.Cleanup takes back what was granted and drops it.
func Role(t testing.TB, schema, what string, setup ...string) (storeURL, role string) {
	t.Helper()
	ctx := context.Background()
	role = "ferry_test_" + what + "_" + strings.TrimPrefix(schema, "ferry_test_")
	for _, sql := range append([]string{"CREATE ROLE %s LOGIN"}, setup...) {
		if err := adminExec(ctx, fmt.Sprintf(sql, role)); err != nil {
			t.Fatalf("pgtest: role %s: %v", role, err)
		}
	}
	t.Cleanup(func() {
		// DROP OWNED takes back what was granted, which DROP ROLE needs.
		if err := adminExec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("pgtest: drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(ConnString(schema))
	if err != nil || u.Scheme == "" {
		t.Fatalf("pgtest: Role needs TEST_DATABASE_URL as a URL, not key=value: %s", URL())
	}
	u.User = url.User(role)
	return u.String(), role
}

// ReaderRole is a Role that may read every table of schema, as it is now,
// and write none: what a reporting role, or one whose GRANTs were revoked,
// may do.
func ReaderRole(t testing.TB, schema, what string) (storeURL, role string) {
	t.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	return Role(t, schema, what, "GRANT USAGE ON SCHEMA "+s+" TO %s", "GRANT SELECT ON ALL TABLES IN SCHEMA "+s+" TO %s")
}

// requireServer checks once per process that a server answers, then fails
// or skips t if none does.
func requireServer(t testing.TB) {
	t.Helper()
	reachOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, URL())
		if err != nil {
			reachErr = err
			return
		}
		reachErr = conn.Ping(ctx)
		conn.Close(ctx)
	})
	if reachErr == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("pgtest: PostgreSQL unreachable at %s: %v", URL(), reachErr)
	}
	// One line: pgx puts one line per address tried in its error.
	reason := strings.Join(strings.Fields(reachErr.Error()), " ")
	t.Skipf("pgtest: no PostgreSQL at %s; set TEST_DATABASE_URL to point the tests at a server (%s)", URL(), reason)
}

func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func randomHex(t testing.TB) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: random schema name: %v", err)
	}
	return hex.EncodeToString(b)
}
