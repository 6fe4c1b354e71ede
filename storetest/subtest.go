package storetest

import (
	"sync"
	"testing"
)

// run runs test as a parallel subtest on a fresh migrated store from setup.
func run[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], name string, test func(*testing.T, *bundle[TX])) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		test(t, setup(t))
	})
}

// atOnce runs f(0) … f(n-1) concurrently and waits for them all.
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}
