package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/storetest"
)

func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, storetest.Harness[pgx.Tx]{
		NewStore: func(t *testing.T, now func() time.Time) ferry.TxStore[pgx.Tx] {
			pool, _ := pgtest.Schema(t)
			s := postgres.New(pool, &postgres.Config{Now: now})
			t.Cleanup(s.Close)
			return s
		},
		Close: func(st ferry.TxStore[pgx.Tx]) { st.(*postgres.Store).Close() },
		RecordMigration: func(t *testing.T, st ferry.TxStore[pgx.Tx], version int) {
			_, err := st.(*postgres.Store).Pool().Exec(context.Background(), `INSERT INTO ferry_migration (version, name) VALUES ($1, 'future')`, version)
			if err != nil {
				t.Fatal(err)
			}
		},
		// A pool on the same schema whose sessions are read-only by default,
		// as ALTER DATABASE ... SET default_transaction_read_only leaves them.
		ReadOnly: func(t *testing.T, st ferry.TxStore[pgx.Tx]) ferry.TxStore[pgx.Tx] {
			schema := st.(*postgres.Store).Pool().Config().ConnConfig.RuntimeParams["search_path"]
			pool := pgtest.PoolOn(t, schema, func(c *pgxpool.Config) {
				c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
			})
			return postgres.New(pool, nil)
		},
		NewEffects: func(t *testing.T, st ferry.TxStore[pgx.Tx]) storetest.Effects[pgx.Tx] {
			pool := st.(*postgres.Store).Pool()
			if _, err := pool.Exec(context.Background(), `CREATE TABLE effect (key text NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			return storetest.Effects[pgx.Tx]{
				Insert: func(ctx context.Context, tx pgx.Tx, key string) error {
					_, err := tx.Exec(ctx, `INSERT INTO effect (key) VALUES ($1)`, key)
					return err
				},
				Count: func(ctx context.Context, key string) (n int, err error) {
					err = pool.QueryRow(ctx, `SELECT count(*) FROM effect WHERE key = $1`, key).Scan(&n)
					return n, err
				},
			}
		},
	})
}
