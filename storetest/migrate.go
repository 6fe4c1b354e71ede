package storetest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// testMigrate checks that Migrate is idempotent and safe to run
// concurrently: migrating an empty store from several goroutines at once,
// or a migrated one again, fails nothing and keeps the data. A schema a
// newer Ferry migrated is refused, and left as it is.
func testMigrate[TX any](t *testing.T, setup, unmigrated func(*testing.T) *bundle[TX], record func(*testing.T, ferry.TxStore[TX], int)) {
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

	t.Run("Plan", func(t *testing.T) {
		t.Parallel()
		b := unmigrated(t)
		plan, err := b.store.MigratePlan(b.ctx)
		if err != nil {
			t.Fatalf("MigratePlan on an empty store: %v", err)
		}
		if len(plan) == 0 {
			t.Fatal("MigratePlan on an empty store: no steps")
		}
		for i, step := range plan {
			if step.Name == "" || step.Summary == "" || (i > 0 && step.Version <= plan[i-1].Version) {
				t.Fatalf("MigratePlan step %d = %s, summary %q: want a name, a summary and rising versions (all: %v)", i, step, step.Summary, plan)
			}
		}
		// Planning changes nothing: the same plan again.
		again, err := b.store.MigratePlan(b.ctx)
		if err != nil || !slices.Equal(again, plan) {
			t.Fatalf("MigratePlan again = %+v, %v; want %+v", again, err, plan)
		}
		if err := b.store.Migrate(b.ctx); err != nil {
			t.Fatal(err)
		}
		if plan, err := b.store.MigratePlan(b.ctx); err != nil || len(plan) != 0 {
			t.Fatalf("MigratePlan after Migrate = %+v, %v; want nothing", plan, err)
		}
	})

	run(t, setup, "NewerSchema", func(t *testing.T, b *bundle[TX]) {
		if record == nil {
			t.Fatal("storetest: Harness.RecordMigration is required")
		}
		id := receive(t, b, "stripe", "evt_1")
		record(t, b.store, 999)
		if err := b.store.Migrate(b.ctx); !errors.Is(err, ferry.ErrSchemaNewer) || !strings.Contains(err.Error(), "999") {
			t.Fatalf("Migrate on a schema with migration 999 = %v; want ErrSchemaNewer naming 999", err)
		}
		if plan, err := b.store.MigratePlan(b.ctx); !errors.Is(err, ferry.ErrSchemaNewer) {
			t.Fatalf("MigratePlan on a schema with migration 999 = %+v, %v; want ErrSchemaNewer", plan, err)
		}
		wantState(t, b, id, ferry.StatePending)
	})
}
