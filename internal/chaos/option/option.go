// Package option is what `ferry chaos` accepts: its options, the scenarios
// and the rule each value must meet. It is apart from package chaos, the
// harness, so an ordinary ferry build checks a command line before it builds
// the chaos binary, without linking the harness.
package option

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Options configure a run.
type Options struct {
	// Bin is the ferry binary the children run. Required.
	Bin string
	// Scenario is one scenario's name, or "all".
	Scenario string
	// Store is "postgres" or "sqlite".
	Store string
	// Events is how many unique events each scenario sends.
	Events int
	// Handler is "external" (forward to the sink) or "tx" (a transactional
	// handler writing chaos_effect in the store's own transaction).
	Handler string
	// Broken, if set, runs the children in a deliberately broken mode
	// ("mark-done-first") to show that the checker catches it.
	Broken string
	// AllowPGRestart lets pgcrash stop and start the PostgreSQL server.
	AllowPGRestart bool
	// DatabaseURL is the PostgreSQL server the harness makes its schemas in.
	DatabaseURL string
	// TTL is the children's lease TTL. Defaults to 2 s; heartbeat is TTL/4.
	TTL time.Duration
	// Senders is how many deliveries are in flight at once. Defaults to 32,
	// and to 4 in kill, zombie and crashloop (see pacedSenders).
	Senders int
	// Seed seeds the run's randomness; 0 picks one (printed).
	Seed uint64
	// Out receives the result lines; Log the progress. Default to stdout and
	// stderr.
	Out, Log io.Writer
}

// Scenarios in the order "all" runs them.
var Scenarios = []string{"duplicates", "kill", "zombie", "dbfaults", "pgcrash", "storefull", "crashloop", "dlq"}

// Names returns the scenarios a --scenario value selects.
func Names(scenario string) ([]string, error) {
	if scenario == "all" {
		return Scenarios, nil
	}
	for _, s := range Scenarios {
		if s == scenario {
			return []string{s}, nil
		}
	}
	return nil, fmt.Errorf("--scenario %q: use all or one of %s", scenario, strings.Join(Scenarios, ", "))
}

// Check refuses a value no run can take, naming the `ferry chaos` flag
// that sets it.
func (o *Options) Check() error {
	if _, err := Names(o.Scenario); err != nil {
		return err
	}
	if o.Store != "postgres" && o.Store != "sqlite" {
		return fmt.Errorf("--store %q: use postgres or sqlite", o.Store)
	}
	if o.Handler != "external" && o.Handler != "tx" {
		return fmt.Errorf("--handler %q: use external or tx", o.Handler)
	}
	if o.Broken != "" && o.Broken != "mark-done-first" {
		return fmt.Errorf("--broken %q: the only broken mode is mark-done-first", o.Broken)
	}
	if o.Broken != "" && o.Handler == "tx" {
		return errors.New("--broken runs with --handler external")
	}
	if o.Events < 10 {
		return fmt.Errorf("--events %d: send at least 10", o.Events)
	}
	return nil
}
