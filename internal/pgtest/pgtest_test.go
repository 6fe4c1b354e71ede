package pgtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry/internal/pgtest"
)

func TestSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	pool, schema := pgtest.Schema(t)

	t.Run("PoolUsesSchema", func(t *testing.T) {
		wantSchema(t, pool.QueryRow(ctx, "SELECT current_schema()"), schema)
	})

	t.Run("ConnStringUsesSchema", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, pgtest.ConnString(schema))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		wantSchema(t, conn.QueryRow(ctx, "SELECT current_schema()"), schema)
	})

	t.Run("PoolOnUsesSchemaAndConfig", func(t *testing.T) {
		other := pgtest.PoolOn(t, schema, func(c *pgxpool.Config) { c.MaxConns = 3 })
		if got := other.Config().MaxConns; got != 3 {
			t.Fatalf("MaxConns = %d, want 3 (configure not applied)", got)
		}
		wantSchema(t, other.QueryRow(ctx, "SELECT current_schema()"), schema)
	})
}

// SchemaURL's sessions see a schema of their own that exists:
// current_schema() is NULL (here "") where search_path names none.
func TestSchemaURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.SchemaURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var current string
	if err := conn.QueryRow(ctx, "SELECT coalesce(current_schema(), '')").Scan(&current); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(current, "ferry_test_") {
		t.Fatalf("current_schema() = %q, want a fresh ferry_test_ schema", current)
	}
}

func wantSchema(t *testing.T, row pgx.Row, schema string) {
	t.Helper()
	var current string
	if err := row.Scan(&current); err != nil {
		t.Fatal(err)
	}
	if current != schema {
		t.Fatalf("current_schema() = %q, want %q", current, schema)
	}
}

func TestSchemaDroppedOnCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	var schema string
	t.Run("Inner", func(t *testing.T) {
		pool, name := pgtest.Schema(t)
		schema = name
		if _, err := pool.Exec(ctx, "CREATE TABLE thing (id int)"); err != nil {
			t.Fatal(err)
		}
	})
	if schema == "" {
		t.Skip("no server: the inner test skipped")
	}

	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("schema %s still exists after cleanup", schema)
	}
}

func TestSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	poolA, _ := pgtest.Schema(t)
	poolB, _ := pgtest.Schema(t)
	if _, err := poolA.Exec(ctx, "CREATE TABLE only_in_a (id int)"); err != nil {
		t.Fatal(err)
	}
	var found bool
	if err := poolB.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Fatal("a table created in one schema is visible from another")
	}
}
