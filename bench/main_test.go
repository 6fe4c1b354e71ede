package main

import (
	"slices"
	"testing"
)

// Each e2e benchmark's figures reach the summary line, under the benchmark
// that sets them (runE2E: name+"_burst_x", name+"_p99_ms").
func TestLineKeysCarryEveryE2EFigure(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"e2e_pg", "e2e_sqlite"} {
		for _, key := range []string{name + "_burst_x", name + "_p99_ms"} {
			if !slices.ContainsFunc(lineKeys, func(k struct{ key, bench string }) bool { return k.key == key && k.bench == name }) {
				t.Errorf("lineKeys lacks %s (set by %s)", key, name)
			}
		}
	}
}
