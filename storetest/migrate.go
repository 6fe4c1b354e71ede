package storetest

import (
	"sync"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// testMigrate checks that Migrate is idempotent and safe to run
// concurrently: migrating an empty store from several goroutines at once,
// or a migrated one again, fails nothing and keeps the data.
func testMigrate[TX any](t *testing.T, setup, unmigrated func(*testing.T) *bundle[TX]) {
	run(t, setup, "Idempotent", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		for range 2 {
			if err := b.store.Migrate(b.ctx); err != nil {
				t.Fatalf("Migrate again: %v", err)
			}
		}
		wantState(t, b, id, ferry.StatePending)
		receive(t, b, "stripe", "evt_2")
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := unmigrated(t)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range cap(errs) {
			wg.Go(func() { errs <- b.store.Migrate(b.ctx) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate: %v", err)
			}
		}
		id := receive(t, b, "stripe", "evt_1")
		if err := b.store.Migrate(b.ctx); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		wantState(t, b, id, ferry.StatePending)
	})
}
