package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// With the database's own clock (no Config.Now), a lease that lapses while a
// transactional handler runs must not be completed by that transaction:
// now() is the transaction's start, so the fence must read the statement's
// time instead.
func TestCompleteTxSeesTheStatementClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := teststore.Postgres(t, nil)
	if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e"}); err != nil {
		t.Fatal(err)
	}
	claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: 300 * time.Millisecond})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	err = st.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the transaction has begun
			return err
		}
		time.Sleep(600 * time.Millisecond) // the handler outlives its lease
		return st.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()})
	})
	if !errors.Is(err, ferry.ErrLeaseLost) {
		t.Fatalf("complete after the lease lapsed: err = %v, want ErrLeaseLost", err)
	}
}
