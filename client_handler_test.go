package ferry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ferry-inbox/ferry"
)

func TestHandleTx(t *testing.T) {
	t.Parallel()

	noop := func(context.Context, *sql.Tx, *ferry.Delivery) error { return nil }

	t.Run("AnotherStoreIsRefusedAtStart", func(t *testing.T) {
		t.Parallel()
		own, other := setupClient(t, false), setupClient(t, false)
		c := own.newClient(t, nil)
		ferry.HandleTx(c, other.store, "stripe", "", noop)
		wantStartRefused(t, c)
	})

	// A wrapper around the client's own store is another value: its done
	// would not be fenced by the store the client claims from.
	withClient(t, "AWrappedStoreIsRefusedAtStart", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, func(cfg *ferry.Config) { cfg.Store = &faultyStore{Store: b.store} })
		ferry.HandleTx(c, b.store, "stripe", "", noop)
		wantStartRefused(t, c)
	})

	withClient(t, "TheClientsOwnStoreWorks", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		c := b.newClient(t, nil)
		ferry.HandleTx(c, b.store, "stripe", "", func(ctx context.Context, tx *sql.Tx, _ *ferry.Delivery) error {
			_, err := tx.ExecContext(ctx, `SELECT 1`)
			return err
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		b.wantLedger(t, id, "[done]")
	})
}

// wantStartRefused checks that c does not start: a HandleTx names a store
// other than the client's own.
func wantStartRefused(t *testing.T, c *ferry.Client) {
	t.Helper()
	err := c.Start(context.Background())
	if err == nil {
		_ = c.Stop(context.Background())
	}
	if !errors.Is(err, ferry.ErrInvalidParams) {
		t.Fatalf("Start = %v, want ErrInvalidParams for a HandleTx on another store", err)
	}
}
