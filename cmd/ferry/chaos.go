//go:build ferrychaos

package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/ferry-inbox/ferry/internal/chaos"
	"github.com/ferry-inbox/ferry/internal/pgtest"
)

// runChaos is `ferry chaos` in a chaos build (-tags ferrychaos): the
// crash-safety proof a user can rerun. The harness lives in internal/chaos;
// the children it starts are this very binary running `ferry serve`, with
// the fault hooks of chaos_hook.go. A ferry built without the tag builds
// this one first (chaos_launch.go).
func runChaos(ctx context.Context, args []string) error {
	fs := newFlags("chaos", "[flags]",
		`Proves crash safety: runs real ferry serve processes under faults (kills, paused
workers, database faults) and checks that every acknowledged delivery is
processed. Exits 1 when the checker finds a lost or wrongly handled event.`)
	scenario := fs.String("scenario", "all", "a `scenario` (duplicates, kill, zombie, dbfaults, pgcrash, storefull, crashloop, dlq) or all")
	store := fs.String("store", "sqlite", "the store the children use: postgres or sqlite")
	events := fs.Int("events", 1000, "unique events each scenario sends")
	handler := fs.String("handler", "external", "external (forward to an in-process app) or tx (a transactional handler writing in the store's own transaction)")
	broken := fs.String("broken", "", "run a deliberately broken worker (mark-done-first) to see the checker fail")
	allowPG := fs.Bool("allow-pg-restart", os.Getenv("FERRY_CHAOS_PG_RESTART") == "1", "let pgcrash stop and start the local PostgreSQL cluster (never on a shared server)")
	dbURL := fs.String("database-url", pgtest.URL(), "the PostgreSQL `URL` the harness makes a schema of its own in (default: TEST_DATABASE_URL, or the local test database)")
	ttl := fs.Duration("ttl", 2*time.Second, "the children's lease TTL (heartbeat is a quarter of it)")
	senders := fs.Int("senders", 0, "deliveries in flight at once (0: 32, and 4 in kill, zombie and crashloop so the inbox is not saturated while reclaim time is measured)")
	seed := fs.Uint64("seed", 0, "seed of the run's randomness (0: a random one, printed)")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	if _, err := chaos.Names(*scenario); err != nil {
		return usagef("--scenario: %v", err)
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	_, err = chaos.Run(ctx, chaos.Options{
		Bin: bin, Scenario: *scenario, Store: *store, Events: *events, Handler: *handler, Broken: *broken,
		AllowPGRestart: *allowPG, DatabaseURL: *dbURL, TTL: *ttl, Seed: *seed, Senders: *senders,
	})
	if errors.Is(err, chaos.ErrFailed) {
		return &exitError{1, err}
	}
	return err
}
