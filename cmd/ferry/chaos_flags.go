package main

import (
	"os"
	"time"

	"github.com/ferry-inbox/ferry/internal/chaos/option"
)

// chaosFlags parses and checks `ferry chaos`'s command line. Both builds
// call it first: an ordinary one (chaos_launch.go) so that -h and a bad
// value answer before it builds the chaos binary.
func chaosFlags(args []string) (*option.Options, error) {
	fs := newFlags("chaos", "[flags]",
		`Proves crash safety: runs real ferry serve processes under faults (kills, paused
workers, database faults) and checks that every acknowledged delivery is
processed. Exits 1 when the checker finds a lost or wrongly handled event.`)
	o := &option.Options{}
	fs.StringVar(&o.Scenario, "scenario", "all", "a `scenario` (duplicates, kill, zombie, dbfaults, pgcrash, storefull, crashloop, dlq) or all")
	fs.StringVar(&o.Store, "store", "sqlite", "the store the children use: postgres or sqlite")
	fs.IntVar(&o.Events, "events", 1000, "unique events each scenario sends")
	fs.StringVar(&o.Handler, "handler", "external", "external (forward to an in-process app) or tx (a transactional handler writing in the store's own transaction)")
	fs.StringVar(&o.Broken, "broken", "", "run a deliberately broken worker (mark-done-first) to see the checker fail")
	fs.BoolVar(&o.AllowPGRestart, "allow-pg-restart", os.Getenv("FERRY_CHAOS_PG_RESTART") == "1", "let pgcrash stop and start the local PostgreSQL cluster (never on a shared server)")
	fs.StringVar(&o.DatabaseURL, "database-url", "", "the PostgreSQL `URL` the harness makes a schema of its own in (default: TEST_DATABASE_URL, or the local test database)")
	fs.DurationVar(&o.TTL, "ttl", 2*time.Second, "the children's lease TTL (heartbeat is a quarter of it)")
	fs.IntVar(&o.Senders, "senders", 0, "deliveries in flight at once (0: 32, and 4 in kill, zombie and crashloop so the inbox is not saturated while reclaim time is measured)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the run's randomness (0: a random one, printed)")
	if err := fs.parseFlagsOnly(args); err != nil {
		return nil, err
	}
	if err := o.Check(); err != nil {
		return nil, usagef("%v (see 'ferry chaos -h')", err)
	}
	return o, nil
}
