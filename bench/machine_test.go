package main

import (
	"os"
	"regexp"
	"testing"
)

func TestCPUModelAndMemTotal(t *testing.T) {
	t.Parallel()
	cpuinfo := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if got := cpuModel(cpuinfo); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q, want AMD EPYC 7B13", got)
	}
	if got := cpuModel("processor\t: 0\n"); got != "" {
		t.Errorf("cpuModel without a model name = %q, want empty", got)
	}
	if kb, ok := memTotalKB("MemTotal:       24542184 kB\nMemFree:         1 kB\n"); !ok || kb != 24542184 {
		t.Errorf("memTotalKB = %d, %v; want 24542184, true", kb, ok)
	}
}

// River's version in the output is the one the build used (go.mod's
// require), not a label that a dependency bump leaves behind.
func TestRiverVersionIsTheBuilds(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github.com/riverqueue/river (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no github.com/riverqueue/river")
	}
	if riverVersion != string(m[1]) {
		t.Errorf("riverVersion = %q, go.mod requires %s", riverVersion, m[1])
	}
}
