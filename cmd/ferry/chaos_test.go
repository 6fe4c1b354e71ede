package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// lastChaosLine returns the counters of the last result line chaos printed.
func lastChaosLine(t *testing.T, stdout string) map[string]int {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "chaos: scenario=") {
		t.Fatalf("last line %q is not a chaos result line; output:\n%s", last, stdout)
	}
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`(\w+)=(\d+)`).FindAllStringSubmatch(last, -1) {
		n, _ := strconv.Atoi(m[2])
		out[m[1]] = n
	}
	return out
}

// TestChaosPGCrashSkipsWithoutPermission: pgcrash never touches a server it
// was not allowed to restart.
func TestChaosPGCrashSkipsWithoutPermission(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(chaosBin, "chaos", "--scenario", "pgcrash", "--store", "postgres", "--events", "100")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_CHAOS_PG_RESTART=") { // never let the test restart a shared server
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	code := 0
	if err := cmd.Run(); err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	stdout, stderr := o.String(), e.String()
	if code != 0 || !strings.Contains(stdout, "chaos: scenario=pgcrash skipped: ") || !strings.Contains(stdout, "--allow-pg-restart") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestChaosFromAnOrdinaryBuild: the README's `go run ./cmd/ferry chaos`
// runs an ordinary build, which builds the chaos binary and runs the
// scenario in it.
func TestChaosFromAnOrdinaryBuild(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runFerry(t, "chaos", "--scenario", "duplicates", "--store", "sqlite", "--events", "20")
	got := lastChaosLine(t, stdout)
	if code != 0 || got["lost"] != 0 || got["acked"] != 20 {
		t.Fatalf("exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, got, stdout, stderr)
	}
}

// TestChaosFlagsBeforeBuilding: an ordinary build answers -h and refuses a
// bad value itself, without building the chaos binary: with no go on PATH
// a build would fail with exit 1.
func TestChaosFlagsBeforeBuilding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		output string
	}{
		{[]string{"-h"}, 0, "usage: ferry chaos [flags]"},
		{[]string{"--scenario", "bogus"}, 2, `ferry chaos: --scenario "bogus": use all or one of duplicates, kill,`},
		{[]string{"--store", "mysql"}, 2, `ferry chaos: --store "mysql": use postgres or sqlite`},
		{[]string{"--events", "5"}, 2, "--events 5: send at least 10"},
	} {
		cmd := exec.Command(ferryBin, append([]string{"chaos"}, tc.args...)...)
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
		var out strings.Builder // -h's help is on stdout, a refusal on stderr
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(out.String(), tc.output) || strings.Contains(out.String(), "building") {
			t.Errorf("ferry chaos %s: exit %d, want %d with %q, no build; output:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.output, out.String())
		}
	}
}

// TestOrdinaryBuildHasNoTestPackages: the ferry a user builds links neither
// the chaos harness nor a test helper (and so not package testing).
func TestOrdinaryBuildHasNoTestPackages(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"testing", "github.com/ferry-inbox/ferry/ferrytest", "github.com/ferry-inbox/ferry/internal/pgtest", "github.com/ferry-inbox/ferry/internal/chaos"}
	for _, pkg := range strings.Fields(string(out)) {
		if slices.Contains(forbidden, pkg) {
			t.Errorf("cmd/ferry imports %s", pkg)
		}
	}
}
