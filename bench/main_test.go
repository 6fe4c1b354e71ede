package main

import (
	"slices"
	"testing"
	"time"
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

// The one-transaction side's figures on the summary line are what the run
// measured (peak in use, peak waiting), not rate × hold from the flags.
func TestConnsSummaryIsMeasured(t *testing.T) {
	t.Parallel()
	o := &options{connsRate: 5, connsHold: 30 * time.Second, connsSteady: 10 * time.Second}
	res := connsResult(o, 150, 50, 40*time.Second, &connsFerryResult{peakInUse: 2, peakOpen: 3},
		&connsTxResult{peakInUse: 47, peakWaiting: 88, done: 60})
	for key, want := range map[string]string{"conns_txheld_in_use": "47", "conns_txheld_waiting": "88"} {
		if got := res.summary[key]; got != want {
			t.Errorf("summary %s = %q, want the measured %s", key, got, want)
		}
	}
	for key, v := range res.summary {
		if v == "150" {
			t.Errorf("summary %s = 150: the computed need is not a measured figure", key)
		}
	}
	for _, k := range lineKeys {
		if k.bench == "conns" {
			if _, ok := res.summary[k.key]; !ok {
				t.Errorf("lineKeys names %s, which conns does not set", k.key)
			}
		}
	}
}
