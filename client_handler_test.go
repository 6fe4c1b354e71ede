package ferry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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

// What would silently not do what was asked is refused: a policy for a
// source no handler works, and a second handler for the same source and
// type.
func TestRegistrationMistakes(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *ferry.Delivery) error { return nil }

	withClient(t, "PolicyWithoutHandlerIsRefusedAtStart", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, func(cfg *ferry.Config) {
			cfg.Sources = []ferry.SourcePolicy{{Name: "Stripe", MaxAttempts: 1, LostLease: ferry.LostLeaseHold}}
		})
		c.Handle("stripe", noop)
		err := wantStartRefused(t, c)
		if !strings.Contains(err.Error(), `"Stripe"`) {
			t.Errorf("Start = %v, want the policy's source named", err)
		}
	})

	withClient(t, "SecondHandlerPanics", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, nil)
		ferry.HandleTx(c, b.store, "stripe", "invoice.paid", func(context.Context, *sql.Tx, *ferry.Delivery) error { return nil })
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "already registered") {
				t.Errorf("a second handler for stripe/invoice.paid: recovered %v, want a panic", p)
			}
		}()
		c.HandleType("stripe", "invoice.paid", noop)
	})
}

// wantStartRefused checks that c does not start, with ErrInvalidParams.
func wantStartRefused(t *testing.T, c *ferry.Client) error {
	t.Helper()
	err := c.Start(context.Background())
	if err == nil {
		_ = c.Stop(context.Background())
	}
	if !errors.Is(err, ferry.ErrInvalidParams) {
		t.Fatalf("Start = %v, want ErrInvalidParams", err)
	}
	return err
}
