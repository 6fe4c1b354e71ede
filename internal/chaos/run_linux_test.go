//go:build linux

package chaos

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/internal/testlog"
)

// The scenarios run end to end on SQLite as `ferry chaos` runs them: the
// harness in this process, its children a ferry built with the chaos
// hooks. They live here, not with the CLI's tests in cmd/ferry, so that
// each package's tests have go test's ten minutes to themselves on a busy
// machine.

// binDir holds the chaos binary; TestMain makes it and removes it.
var binDir string

// chaosBinary builds cmd/ferry with the chaos hooks, race-enabled as the
// CLI's tests build it, once for the tests that need it.
var chaosBinary = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "ferry-chaos")
	build := exec.Command("go", "build", "-race", "-tags", "ferrychaos", "-o", bin, "github.com/ferry-inbox/ferry/cmd/ferry")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return bin, build.Run()
})

// runScenario runs scenario with 200 events on SQLite and leases of ttl,
// and returns its result, its verdict and what the harness printed.
func runScenario(t *testing.T, scenario, broken string, ttl time.Duration) (*Result, []string, string) {
	t.Helper()
	bin, err := chaosBinary()
	if err != nil {
		t.Fatalf("building the chaos binary: %v", err)
	}
	out := &testlog.Buffer{}
	o := Options{Bin: bin, Scenario: scenario, Store: "sqlite", Events: 200, Handler: "external",
		Broken: broken, TTL: ttl, Out: out, Log: out}
	results, err := Run(t.Context(), o)
	if (err != nil && !errors.Is(err, ErrFailed)) || len(results) != 1 {
		t.Fatalf("Run: %d results, %v\n%s", len(results), err, out)
	}
	return results[0], results[0].Verdict(&o), out.String()
}

// detailCounts reads the key=N pairs of r's detail line that starts with
// prefix ("sigkills", "zombie").
func detailCounts(r *Result, prefix string) map[string]int {
	counts := map[string]int{}
	for _, d := range r.Details {
		if !strings.HasPrefix(d, prefix) {
			continue
		}
		for _, field := range strings.Fields(d) {
			if k, v, ok := strings.Cut(field, "="); ok {
				if n, err := strconv.Atoi(v); err == nil {
					counts[k] = n
				}
			}
		}
	}
	return counts
}

// TestKillCatchesMarkDoneFirst proves the checker catches what it claims:
// workers that mark an event done before doing its work (the design Ferry
// replaces) lose events when killed in between, and the run says so.
func TestKillCatchesMarkDoneFirst(t *testing.T) {
	t.Parallel()
	r, verdict, out := runScenario(t, "kill", "mark-done-first", 2*time.Second)
	if len(verdict) == 0 || r.Lost == 0 {
		t.Fatalf("verdict %q, lost=%d: the broken worker went unnoticed\n%s", verdict, r.Lost, out)
	}
	if !strings.Contains(out, "done in the store but its effect never happened") {
		t.Errorf("no LOST note names the cause:\n%s", out)
	}
}

// TestKillPasses is the same run with Ferry's real worker: nothing
// acknowledged is lost and every duplicate effect has its ledger row.
//
// The run also fails when one of its random crash points was never hit
// (too few events for its luck): a coverage verdict, which this test takes
// only when some crash point was hit.
func TestKillPasses(t *testing.T) {
	t.Parallel()
	r, verdict, out := runScenario(t, "kill", "", 2*time.Second)
	if r.Lost != 0 || r.Acked != 200 || r.Effects != 200 {
		t.Fatalf("%s\n%s", r.Line(), out)
	}
	c := detailCounts(r, "sigkills")
	hit := c["after-claim"] + c["after-effect"] + c["after-commit"]
	for _, reason := range verdict {
		if !strings.HasSuffix(reason, " was never hit; send more events") || hit == 0 {
			t.Fatalf("verdict %q\n%s", verdict, out)
		}
	}
}

// TestZombieProbesTheFence: zombie replays the paused worker's stale
// leases while only the lease fence can refuse them, once with the lease
// expired and unreclaimed and once with the event under a later attempt,
// and says so; a probe of an event already done would prove nothing.
func TestZombieProbesTheFence(t *testing.T) {
	t.Parallel()
	// Every run must pass; on a loaded machine a run may not catch a
	// worker at one of the two moments (it says "not tested:"), so one of
	// three must probe both. The survivor must be paused before the
	// zombie's leases lapse, TTL less a heartbeat interval after its last
	// beat at the most: 5 s leases give it 3.3 s, which a busy machine's
	// pauses (retried while the survivor holds a SQLite lock) need.
	var last string
	for range 3 {
		r, verdict, out := runScenario(t, "zombie", "", 5*time.Second)
		c := detailCounts(r, "zombie")
		if len(verdict) != 0 || r.StaleWritesAccepted != 0 {
			t.Fatalf("verdict %q, %s\n%s", verdict, r.Line(), out)
		}
		if c["expired_lease"] != 0 && c["reclaimed_under_later_attempt"] != 0 {
			return
		}
		last = out
	}
	t.Fatalf("no run of three probed both moments:\n%s", last)
}
