package postgres_test

import (
	"context"
	"errors"
	"fmt"
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
	// A transaction that began after the lease had already lapsed (a
	// stalled machine) would prove nothing: the transaction clock would
	// fence it too. Such a try is made again, with a new event.
	errLate := errors.New("the transaction began after the lease lapsed")
	for try := range 5 {
		id := fmt.Sprintf("e%d", try)
		if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: id}); err != nil {
			t.Fatal(err)
		}
		claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: 2 * time.Second})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %d, %v", len(claims), err)
		}
		lease := claims[0].Event.Lease()
		err = st.InTx(ctx, func(tx pgx.Tx) error {
			var held bool
			if err := tx.QueryRow(ctx, "SELECT now() < $1", claims[0].Event.LeaseExpiresAt).Scan(&held); err != nil {
				return err
			}
			if !held {
				return errLate
			}
			// The handler outlives its lease, by the database's clock.
			for {
				var lapsed bool
				if err := tx.QueryRow(ctx, "SELECT clock_timestamp() > $1", claims[0].Event.LeaseExpiresAt).Scan(&lapsed); err != nil {
					return err
				}
				if lapsed {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			return st.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: lease})
		})
		if errors.Is(err, errLate) {
			continue
		}
		if !errors.Is(err, ferry.ErrLeaseLost) {
			t.Fatalf("complete after the lease lapsed: err = %v, want ErrLeaseLost", err)
		}
		return
	}
	t.Fatal("every transaction began after its 2s lease had lapsed: the machine stalled five times")
}
