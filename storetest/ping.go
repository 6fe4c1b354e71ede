package storetest

import (
	"errors"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// testPing checks that Ping tells a store that can write from one that only
// answers.
func testPing[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], readOnly func(*testing.T, ferry.TxStore[TX]) ferry.TxStore[TX]) {
	run(t, setup, "Writable", func(t *testing.T, b *bundle[TX]) {
		if err := b.store.Ping(b.ctx); err != nil {
			t.Fatalf("Ping = %v, want nil", err)
		}
	})

	// A store that answers reads but refuses every write (a standby after
	// failover) must fail Ping, or /readyz and doctor pass it while every
	// delivery gets 503.
	run(t, setup, "ReadOnly", func(t *testing.T, b *bundle[TX]) {
		if readOnly == nil {
			t.Fatal("Harness.ReadOnly is required")
		}
		receive(t, b, "a", "before")
		ro := readOnly(t, b.store)
		if _, err := ro.EventGet(b.ctx, &ferry.EventGetParams{Source: "a", EventID: "before"}); err != nil {
			t.Fatalf("read-only store: EventGet = %v, want it to read", err)
		}
		if _, err := ro.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "a", EventID: "after", Payload: []byte(`{}`)}); err == nil {
			t.Fatal("read-only store: EventReceive succeeded; the harness did not make it read-only")
		}
		if err := ro.Ping(b.ctx); !errors.Is(err, ferry.ErrReadOnly) {
			t.Errorf("read-only store: Ping = %v, want ferry.ErrReadOnly", err)
		}
		if err := b.store.Ping(b.ctx); err != nil {
			t.Errorf("the writable store beside it: Ping = %v, want nil", err)
		}
	})
}
