//go:build ferrychaos && unix

package main

// The chaos hook: test-only behaviour of `ferry serve` that `ferry chaos`
// switches on through environment variables, read once at start. This file
// is compiled only into a binary built with -tags ferrychaos, the one `ferry
// chaos` builds for its children; a ferry built any other way has no hook,
// and these variables mean nothing to it. With none of them set the hook is
// nil and serve runs exactly the ordinary forwarder.
//
//	FERRY_CHAOS_CRASH_POINT=POINT:N   SIGKILL this process the Nth time the
//	                                  worker reaches POINT: after-claim (the
//	                                  handler started, no effect yet),
//	                                  after-effect (the effect happened, the
//	                                  done not committed), after-commit (the
//	                                  done committed).
//	FERRY_CHAOS_HANDLER=tx-effect     replace the forwarder with a transactional
//	                                  handler that inserts one row into the
//	                                  table chaos_effect (no unique constraint)
//	                                  in the transaction that marks the event
//	                                  done, and fails while the event id is
//	                                  listed in chaos_poison.
//	FERRY_CHAOS_HANDLER_DELAY=DUR     sleep DUR at the start of each attempt,
//	                                  so leases are held when a worker is
//	                                  stopped.
//	FERRY_CHAOS_BROKEN=mark-done-first  the naive design Ferry replaces: mark
//	                                  the event done, then do the work. It
//	                                  exists so the chaos checker can be shown
//	                                  to catch the loss it causes.

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
)

// Crash points, as FERRY_CHAOS_CRASH_POINT names them.
const (
	crashAfterClaim  = "after-claim"
	crashAfterEffect = "after-effect"
	crashAfterCommit = "after-commit"
)

type faultHook struct {
	store   ferry.Store
	log     *slog.Logger
	point   string
	crashAt int64
	reached atomic.Int64
	txMode  bool
	delay   time.Duration
	broken  bool
}

func init() {
	chaosTxHandlers = func() bool {
		tx, _ := envMode("FERRY_CHAOS_HANDLER", "tx-effect", "chaos handler") // a bad value stops newChaosHook
		return tx
	}
	newChaosHook = func(st ferry.Store, log *slog.Logger) (chaosHook, error) {
		h, err := chaosHookFromEnv(st, log)
		if h == nil || err != nil {
			return nil, err // an untyped nil: no hook
		}
		return h, nil
	}
}

// chaosHookFromEnv returns nil unless a FERRY_CHAOS_ variable is set.
func chaosHookFromEnv(st ferry.Store, log *slog.Logger) (*faultHook, error) {
	h := &faultHook{store: st, log: log}
	on := false
	if v := os.Getenv("FERRY_CHAOS_CRASH_POINT"); v != "" {
		on = true
		point, n, _ := strings.Cut(v, ":")
		switch point {
		case crashAfterClaim, crashAfterEffect, crashAfterCommit:
		default:
			return nil, fmt.Errorf("%w: FERRY_CHAOS_CRASH_POINT=%q: use after-claim, after-effect or after-commit, with :N", errConfig, v)
		}
		at, err := strconv.ParseInt(n, 10, 64)
		if err != nil || at < 1 {
			at = 1
		}
		h.point, h.crashAt = point, at
	}
	var err error
	if h.txMode, err = envMode("FERRY_CHAOS_HANDLER", "tx-effect", "chaos handler"); err != nil {
		return nil, err
	}
	if v := os.Getenv("FERRY_CHAOS_HANDLER_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%w: FERRY_CHAOS_HANDLER_DELAY=%q: %v", errConfig, v, err)
		}
		on, h.delay = true, d
	}
	if h.broken, err = envMode("FERRY_CHAOS_BROKEN", "mark-done-first", "broken mode"); err != nil {
		return nil, err
	}
	if !on && !h.txMode && !h.broken {
		return nil, nil
	}
	log.Warn("ferry: CHAOS HOOK ACTIVE: this process is a test subject of `ferry chaos`, not a deployment",
		"crash_point", h.point, "crash_at", h.crashAt, "handler", os.Getenv("FERRY_CHAOS_HANDLER"), "broken", h.broken, "delay", h.delay)
	return h, nil
}

// envMode reads a variable that is unset or names the one mode it switches
// on (what says what kind of mode, for the error).
func envMode(name, mode, what string) (bool, error) {
	switch v := os.Getenv(name); v {
	case "":
		return false, nil
	case mode:
		return true, nil
	default:
		return false, fmt.Errorf("%w: %s=%q: the only %s is %s", errConfig, name, v, what, mode)
	}
}

// maybeCrash SIGKILLs the process the crashAt-th time point is reached. The
// line it logs first is how the harness counts the crash points it hit.
func (h *faultHook) maybeCrash(point string, d *ferry.Delivery) {
	if h.point != point || h.reached.Add(1) != h.crashAt {
		return
	}
	fmt.Fprintf(os.Stderr, "{\"msg\":\"ferry: chaos crash point\",\"point\":%q,\"event_id\":%q,\"attempt\":%d}\n", point, d.Event.EventID, d.Attempt)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns: the signal is on its way
}

func (h *faultHook) sleep(ctx context.Context) {
	if h.delay <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(h.delay):
	}
}

// register installs the source's handler: fwd wrapped with the crash points,
// or the transactional chaos handler.
func (h *faultHook) register(c *ferry.Client, source string, fwd ferry.HandlerFunc) error {
	if h.txMode {
		return h.registerTx(c, source)
	}
	c.Handle(source, func(ctx context.Context, d *ferry.Delivery) error {
		h.sleep(ctx)
		if h.broken {
			// The naive order: the marker first, the work second. A crash
			// in between leaves an event marked handled that never ran.
			if err := h.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: d.Event.Lease()}); err != nil {
				return err
			}
		}
		h.maybeCrash(crashAfterClaim, d)
		if err := fwd(ctx, d); err != nil {
			return err
		}
		h.maybeCrash(crashAfterEffect, d)
		return nil
	})
	return nil
}

func (h *faultHook) registerTx(c *ferry.Client, source string) error {
	effect := func(d *ferry.Delivery) (sum string, worker string) {
		s := sha256.Sum256(d.Event.Payload)
		return hex.EncodeToString(s[:]), c.ID()
	}
	switch st := h.store.(type) {
	case *postgres.Store:
		ferry.HandleTx(c, st, source, "", func(ctx context.Context, tx pgx.Tx, d *ferry.Delivery) error {
			h.sleep(ctx)
			h.maybeCrash(crashAfterClaim, d)
			var poisoned bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM chaos_poison WHERE source = $1 AND event_id = $2)`,
				d.Event.Source, d.Event.EventID).Scan(&poisoned); err != nil {
				return err
			}
			if poisoned {
				return fmt.Errorf("chaos: event %s is poisoned", d.Event.EventID)
			}
			sum, worker := effect(d)
			if _, err := tx.Exec(ctx, `INSERT INTO chaos_effect (idempotency_key, source, event_id, attempt, body_sha256, worker) VALUES ($1, $2, $3, $4, $5, $6)`,
				d.IdempotencyKey, d.Event.Source, d.Event.EventID, d.Attempt, sum, worker); err != nil {
				return err
			}
			h.maybeCrash(crashAfterEffect, d)
			return nil
		})
	case *sqlite.Store:
		ferry.HandleTx(c, st, source, "", func(ctx context.Context, tx *sql.Tx, d *ferry.Delivery) error {
			h.sleep(ctx)
			h.maybeCrash(crashAfterClaim, d)
			var poisoned bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM chaos_poison WHERE source = ? AND event_id = ?)`,
				d.Event.Source, d.Event.EventID).Scan(&poisoned); err != nil {
				return err
			}
			if poisoned {
				return fmt.Errorf("chaos: event %s is poisoned", d.Event.EventID)
			}
			sum, worker := effect(d)
			if _, err := tx.ExecContext(ctx, `INSERT INTO chaos_effect (idempotency_key, source, event_id, attempt, body_sha256, worker) VALUES (?, ?, ?, ?, ?, ?)`,
				d.IdempotencyKey, d.Event.Source, d.Event.EventID, d.Attempt, sum, worker); err != nil {
				return err
			}
			h.maybeCrash(crashAfterEffect, d)
			return nil
		})
	default:
		return fmt.Errorf("%w: FERRY_CHAOS_HANDLER=tx-effect needs a postgres or sqlite store, not %T", errConfig, h.store)
	}
	return nil
}

// observer wraps obs to crash after a committed done.
func (h *faultHook) observer(obs ferry.Observer) ferry.Observer {
	return &chaosObserver{next: obs, hook: h}
}

type chaosObserver struct {
	next ferry.Observer
	hook *faultHook
}

func (o *chaosObserver) AttemptFinished(source string, outcome ferry.Outcome, reclaimed bool, took time.Duration) {
	if o.next != nil {
		o.next.AttemptFinished(source, outcome, reclaimed, took)
	}
	if outcome == ferry.OutcomeDone {
		o.hook.maybeCrash(crashAfterCommit, &ferry.Delivery{Event: &ferry.Event{Source: source}})
	}
}
