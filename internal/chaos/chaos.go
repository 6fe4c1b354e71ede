//go:build unix

// Package chaos is the engine of `ferry chaos`: it starts real `ferry serve`
// children against PostgreSQL or SQLite, drives them with a sender that
// signs and retries like a webhook provider, records every effect in a sink
// (or, in tx mode, in a table with no unique constraint), injects faults,
// drains, and checks Jepsen's queue rule: nothing acknowledged is lost,
// nothing unexpected appears, and every duplicate effect is explained by the
// attempt ledger.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/ferry-inbox/ferry/internal/chaos/option"
)

// Options configure a run; option.Options.Check says which values a run
// takes.
type Options = option.Options

// Result is one scenario's outcome; Line is the line `ferry chaos` ends it
// with.
type Result struct {
	Scenario, Store     string
	Events, Acked       int
	Stored, Lost        int
	Unexpected, Effects int
	DuplicateEffects    int
	UntracedDuplicates  int
	StaleWritesAccepted int
	MaxReclaimMS        int64

	// Skipped says why the scenario did not run (it then passes).
	Skipped string
	// Failures are scenario-specific reasons to fail (a fault that was
	// never injected, a dead set that is not the poisoned one, ...).
	Failures []string
	// Details are key=value facts about the run: faults injected, retries.
	Details []string
	// Notes are the first findings behind non-zero counters.
	Notes []string
	Took  time.Duration
}

func (r *Result) Line() string {
	return fmt.Sprintf("chaos: scenario=%s store=%s events=%d acked=%d stored=%d lost=%d unexpected=%d effects=%d duplicate_effects=%d untraced_duplicates=%d stale_writes_accepted=%d max_reclaim_ms=%d",
		r.Scenario, r.Store, r.Events, r.Acked, r.Stored, r.Lost, r.Unexpected, r.Effects, r.DuplicateEffects, r.UntracedDuplicates, r.StaleWritesAccepted, r.MaxReclaimMS)
}

func (r *Result) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

func (r *Result) detail(format string, args ...any) {
	r.Details = append(r.Details, fmt.Sprintf(format, args...))
}

// Verdict lists why r fails; empty means it passed.
func (r *Result) Verdict(o *Options) []string {
	if r.Skipped != "" {
		return nil
	}
	out := append([]string(nil), r.Failures...)
	bad := func(n int, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%s=%d", what, n))
		}
	}
	bad(r.Lost, "lost")
	bad(r.Unexpected, "unexpected")
	bad(r.UntracedDuplicates, "untraced_duplicates")
	bad(r.StaleWritesAccepted, "stale_writes_accepted")
	if o.Handler == "tx" {
		bad(r.DuplicateEffects, "duplicate_effects (tx mode must have none)")
	}
	if limit := (o.TTL + reclaimSlack).Milliseconds(); r.MaxReclaimMS > limit {
		out = append(out, fmt.Sprintf("max_reclaim_ms=%d exceeds ttl + %v (%d): a lease was taken back long after it lapsed", r.MaxReclaimMS, reclaimSlack, limit))
	}
	return out
}

// reclaimSlack is how long past its TTL a dead worker's lease may wait to
// be taken back before the run fails: a ceiling that only a reclaim waiting
// for something other than the lease crosses, so a loaded 2-core machine
// passes. max_reclaim_ms itself is printed; how fast reclaim is belongs to
// the benchmark, not to this verdict.
const reclaimSlack = 30 * time.Second

// ErrFailed is returned by Run when any scenario failed.
var ErrFailed = errors.New("chaos: a scenario failed")

// defaults checks o and fills in what it leaves out.
func defaults(o *Options) error {
	if o.Bin == "" {
		return errors.New("chaos: Options.Bin is required")
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.TTL == 0 {
		o.TTL = 2 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if err := o.Check(); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// Run runs the selected scenarios one after another, printing each one's
// details and, last, its result line. It returns ErrFailed if any failed.
func Run(ctx context.Context, o Options) ([]*Result, error) {
	if err := defaults(&o); err != nil {
		return nil, err
	}
	names, _ := option.Names(o.Scenario) // checked by defaults
	fmt.Fprintf(o.Log, "chaos: store=%s handler=%s events=%d ttl=%v seed=%d\n", o.Store, o.Handler, o.Events, o.TTL, o.Seed)
	var results []*Result
	failed := false
	for i, name := range names {
		if ctx.Err() != nil {
			break
		}
		r := runOne(ctx, &o, name, newRand(o.Seed, uint64(i)))
		results = append(results, r)
		prefix := "chaos: scenario=" + name
		for _, d := range r.Details {
			fmt.Fprintf(o.Out, "%s detail: %s\n", prefix, d)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(o.Out, "%s note: %s\n", prefix, n)
		}
		if r.Skipped != "" {
			fmt.Fprintf(o.Out, "%s skipped: %s\n", prefix, r.Skipped)
			continue
		}
		v := r.Verdict(&o)
		for _, reason := range v {
			fmt.Fprintf(o.Out, "%s FAIL: %s\n", prefix, reason)
		}
		failed = failed || len(v) > 0
		fmt.Fprintf(o.Out, "%s took=%s result=%s\n", prefix, r.Took.Round(100*time.Millisecond), map[bool]string{true: "FAIL", false: "pass"}[len(v) > 0])
		fmt.Fprintln(o.Out, r.Line())
	}
	if ctx.Err() != nil {
		return results, fmt.Errorf("chaos: interrupted: %w", ctx.Err())
	}
	if failed {
		return results, ErrFailed
	}
	return results, nil
}

// newRand is a generator from a seed that goroutines may share: the
// scenario's faults, the sender's jitter and the crash points all draw from
// --seed, so a seed reproduces a run's choices (not the machine's timing).
func newRand(seed, stream uint64) *rand.Rand {
	return rand.New(&lockedSource{src: rand.NewPCG(seed, stream)})
}

// lockedSource makes a rand.Source safe for concurrent use; rand.Rand
// keeps no state of its own besides its source.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (l *lockedSource) Uint64() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.Uint64()
}

func runOne(ctx context.Context, o *Options, name string, rng *rand.Rand) *Result {
	r := &Result{Scenario: name, Store: o.Store}
	started := time.Now()
	defer func() { r.Took = time.Since(started) }()
	if reason := skipReason(o, name); reason != "" {
		r.Skipped = reason
		return r
	}
	// Every loop below is bounded by its own count and by this deadline.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute+time.Duration(o.Events)*50*time.Millisecond)
	defer cancel()
	fmt.Fprintf(o.Log, "chaos: %s: starting (%d events, %s)\n", name, o.Events, o.Store)
	e, err := newEnv(ctx, o, name)
	if err != nil {
		r.fail("setup: %v", err)
		return r
	}
	defer e.close()
	s := &run{env: e, r: r, rng: rng, name: name}
	if err := scenarioFuncs[name](s, ctx); err != nil {
		r.fail("%v", err)
	}
	if err := e.lastError(); err != nil {
		r.fail("a child could not be restarted: %v", err)
	}
	return r
}

func (e *env) lastError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastErr
}

func skipReason(o *Options, name string) string {
	switch {
	case name == "dbfaults" && o.Store == "sqlite":
		return "SQLite is a file in the same process: there is no connection between Ferry and the store to reset, slow or black-hole (run it with --store postgres)"
	case name == "pgcrash" && o.Store == "sqlite":
		return "there is no PostgreSQL server in a SQLite run (crashloop kills the SQLite deployment instead)"
	case name == "pgcrash" && !o.AllowPGRestart:
		return "stopping PostgreSQL with -m immediate would break everyone else using this server; pass --allow-pg-restart (or FERRY_CHAOS_PG_RESTART=1) on a server the harness may control"
	}
	return ""
}
