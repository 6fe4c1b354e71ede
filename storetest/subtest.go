package storetest

import "testing"

// run runs test as a parallel subtest on a fresh migrated store from setup.
func run[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], name string, test func(*testing.T, *bundle[TX])) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		test(t, setup(t))
	})
}
