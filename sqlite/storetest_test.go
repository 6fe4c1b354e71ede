package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
	"github.com/ferry-inbox/ferry/storetest"
)

func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, storetest.Harness[*sql.Tx]{
		NewStore: func(t *testing.T, now func() time.Time) ferry.TxStore[*sql.Tx] {
			s, err := sqlite.Open(filepath.Join(t.TempDir(), "ferry.db"), &sqlite.Config{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Close: func(st ferry.TxStore[*sql.Tx]) { st.(*sqlite.Store).Close() },
		RecordMigration: func(t *testing.T, st ferry.TxStore[*sql.Tx], version int) {
			_, err := st.(*sqlite.Store).DB().Exec(`INSERT INTO ferry_migration (version, name, applied_at) VALUES (?, 'future', 0)`, version)
			if err != nil {
				t.Fatal(err)
			}
		},
		// The file made read-only, then opened again. Root writes whatever
		// the mode (CI runs as root): there the file is opened mode=ro.
		ReadOnly: func(t *testing.T, st ferry.TxStore[*sql.Tx]) ferry.TxStore[*sql.Tx] {
			var path string
			if err := st.(*sqlite.Store).DB().QueryRow(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o444); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(path, 0o644) })
			open := path
			if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
				f.Close()
				t.Log("chmod does not stop this user writing (root?): opening mode=ro instead")
				open = "file:" + path + "?mode=ro"
			}
			ro, err := sqlite.Open(open, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ro.Close() })
			return ro
		},
		NewEffects: func(t *testing.T, st ferry.TxStore[*sql.Tx]) storetest.Effects[*sql.Tx] {
			db := st.(*sqlite.Store).DB()
			if _, err := db.Exec(`CREATE TABLE effect (key TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			return storetest.Effects[*sql.Tx]{
				Insert: func(ctx context.Context, tx *sql.Tx, key string) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO effect (key) VALUES (?)`, key)
					return err
				},
				Count: func(ctx context.Context, key string) (n int, err error) {
					err = db.QueryRowContext(ctx, `SELECT count(*) FROM effect WHERE key = ?`, key).Scan(&n)
					return n, err
				},
			}
		},
	})
}
