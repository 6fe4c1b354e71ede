package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// A checkpoint write is fenced by its lease for the whole statement, not
// only at its start: a successor that takes the lease and writes while the
// write waits (here, one transaction holding both) wins, and the paused
// owner's write finds the lease gone (ErrLeaseLost) instead of moving the
// successor's checkpoint back.
func TestCheckpointPutLosesToATakeoverDuringIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, waiting := lockOrderStore(t, nil)
	const lease, name = "catchup/stripe", "catchup/stripe"
	if held, err := st.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: lease, Owner: "old", TTL: time.Hour}); err != nil || !held {
		t.Fatalf("LeaseAcquire = %v, %v", held, err)
	}

	successor, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = successor.Rollback(ctx) })
	for _, q := range []string{
		`UPDATE ferry_lease SET owner = 'new' WHERE name = '` + lease + `'`,
		`INSERT INTO ferry_checkpoint (name, value, updated_at) VALUES ('` + name + `', 'new', now())`,
	} {
		if _, err := successor.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	put := inBackground(func() error {
		return st.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: name, Value: "old", Lease: lease, Owner: "old"})
	})
	until(t, "the old owner's write to wait on the successor", func() bool { return waiting(1) })
	if err := successor.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-put; !errors.Is(err, ferry.ErrLeaseLost) {
		t.Errorf("the old owner's write after the takeover: err = %v, want ErrLeaseLost", err)
	}
	cp, err := st.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: name})
	if err != nil || cp.Value != "new" {
		t.Fatalf("checkpoint = %+v, %v; want the successor's \"new\"", cp, err)
	}
}
