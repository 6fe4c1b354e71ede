package ferry_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// A client holds at most MaxHeldBytes of payloads plus one event, however
// many workers are free: the bound large bodies need.
func TestClientHoldsAtMostMaxHeldBytes(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	var ids []int64
	for i := range 10 {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: fmt.Sprint("evt_", i), Type: "test", Payload: bytes.Repeat([]byte("x"), 100),
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	c := b.newClient(t, func(c *ferry.Config) {
		c.Workers, c.Prefetch, c.MaxHeldBytes, c.ShutdownGrace = 10, 1, 250, time.Millisecond
	})
	running := make(chan struct{}, 10)
	c.Handle("stripe", func(ctx context.Context, _ *ferry.Delivery) error {
		running <- struct{}{}
		<-ctx.Done() // held until Stop
		return ctx.Err()
	})
	start(t, c)
	for range 3 { // 200 bytes fit in the first claim, a third event past 250
		<-running
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// With the budget spent no claim is made until an event finishes, so
	// the ledger holds exactly the three attempts that ran.
	started := 0
	for _, id := range ids {
		started += len(b.outcomes(t, id))
	}
	if started != 3 {
		t.Errorf("%d attempts started with 10 workers free and 250 bytes of budget for 100-byte events, want 3", started)
	}
}
