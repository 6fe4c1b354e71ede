package ferry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/testlog"
	"github.com/ferry-inbox/ferry/sqlite"
)

func TestHandleTx(t *testing.T) {
	t.Parallel()

	noop := func(context.Context, *sql.Tx, *ferry.Delivery) error { return nil }

	t.Run("AnotherStoreIsRefusedAtStart", func(t *testing.T) {
		t.Parallel()
		own, other := setupClient(t, false), setupClient(t, false)
		c := own.newClient(t, nil)
		ferry.HandleTx(c, other.store, "stripe", "", noop)
		wantStartRefused(t, c)
	})

	// A wrapper around the client's own store is another value: its done
	// would not be fenced by the store the client claims from.
	withClient(t, "AWrappedStoreIsRefusedAtStart", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, func(cfg *ferry.Config) { cfg.Store = &faultyStore{Store: b.store} })
		ferry.HandleTx(c, b.store, "stripe", "", noop)
		wantStartRefused(t, c)
	})

	// A handler that ends Ferry's transaction itself leaves its writes
	// (committed or not) without the event's done: the event goes dead at
	// its first attempt, saying why, instead of repeating them each retry.
	withClient(t, "CommitOrRollbackInTheHandlerIsDeadNotRetried", false, func(t *testing.T, b *clientBundle) {
		if _, err := b.store.DB().ExecContext(b.ctx, `CREATE TABLE effect (event_id TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		committed, rolledBack := b.receive(t, "stripe", "evt_commit"), b.receive(t, "stripe", "evt_rollback")
		// Commits, then fails on the ended tx: its error must not make it a
		// retry that commits again.
		failedAfter := b.receive(t, "stripe", "evt_commit_then_fail")
		var runs sync.Map
		c := b.newClient(t, func(cfg *ferry.Config) { cfg.Sources = []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: 3}} })
		ferry.HandleTx(c, b.store, "stripe", "", func(ctx context.Context, tx *sql.Tx, d *ferry.Delivery) error {
			n, _ := runs.LoadOrStore(d.Event.EventID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			if _, err := tx.ExecContext(ctx, `INSERT INTO effect (event_id) VALUES (?)`, d.Event.EventID); err != nil {
				return err
			}
			switch d.Event.EventID {
			case "evt_commit":
				return tx.Commit()
			case "evt_commit_then_fail":
				if err := tx.Commit(); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `SELECT 1`)
				return err
			}
			return tx.Rollback()
		})
		start(t, c)
		for id, effects := range map[int64]int{committed: 1, rolledBack: 0, failedAfter: 1} {
			ev := b.waitState(t, id, ferry.StateDead)
			if ev.Attempt != 1 || !strings.Contains(ev.LastError, "committed or rolled back Ferry's transaction") {
				t.Errorf("%s: dead at attempt %d with %q, want at its first, saying the handler ended the transaction", ev.EventID, ev.Attempt, ev.LastError)
			}
			b.wantLedger(t, id, "[dead]")
			if n, _ := runs.Load(ev.EventID); n.(*atomic.Int32).Load() != 1 {
				t.Errorf("%s: handler ran %d times, want 1", ev.EventID, n.(*atomic.Int32).Load())
			}
			var got int
			if err := b.store.DB().QueryRowContext(b.ctx, `SELECT count(*) FROM effect WHERE event_id = ?`, ev.EventID).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != effects {
				t.Errorf("%s: %d effects, want %d", ev.EventID, got, effects)
			}
		}
	})

	// A lease that lapsed while the handler ran, unseen by its heartbeats,
	// is found by EventCompleteTx's fence: the writes roll back and the
	// attempt is a lost lease, left to the next claim, not a failure that a
	// fenced write could never record.
	withClient(t, "ALeaseLapsedAtCompletionIsALostLease", true, func(t *testing.T, b *clientBundle) {
		if _, err := b.store.DB().ExecContext(b.ctx, `CREATE TABLE effect (event_id TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		id := b.receive(t, "stripe", "evt_1")
		var logs testlog.Buffer
		var runs atomic.Int32
		c := b.newClient(t, func(cfg *ferry.Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		ferry.HandleTx(c, b.store, "stripe", "", func(ctx context.Context, tx *sql.Tx, d *ferry.Delivery) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effect (event_id) VALUES (?)`, d.Event.EventID); err != nil {
				return err
			}
			if runs.Add(1) == 1 {
				b.clock.Advance(time.Minute) // past the 30 s lease
			}
			return nil
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		b.wantLedger(t, id, "[lease_expired done]")
		// Attempt 1 records after its rollback, which attempt 2 may outrun.
		waitFor(t, "attempt 1's lost lease logged", func() bool {
			return strings.Contains(logs.String(), "lease lost; this attempt's verdict was not recorded")
		})
		if strings.Contains(logs.String(), "could not record failure") {
			t.Errorf("want the attempt logged as a lost lease, not as a failure:\n%s", logs.String())
		}
		var effects int
		if err := b.store.DB().QueryRowContext(b.ctx, `SELECT count(*) FROM effect`).Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if effects != 1 {
			t.Errorf("%d effects, want 1: the lapsed attempt's rolled back", effects)
		}
	})

	// Dead for ending tx, the handler's error still goes to the log through
	// its Redacted: a downstream's answer may echo the payload.
	withClient(t, "AnEndedTxKeepsTheHandlersRedaction", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		var logs testlog.Buffer
		c := b.newClient(t, func(cfg *ferry.Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		ferry.HandleTx(c, b.store, "stripe", "", func(_ context.Context, tx *sql.Tx, _ *ferry.Delivery) error {
			if err := tx.Commit(); err != nil {
				return err
			}
			return redactedError{"downstream said: PAYLOADMARK", "downstream said: [redacted]"}
		})
		start(t, c)
		ev := b.waitState(t, id, ferry.StateDead)
		if !strings.Contains(ev.LastError, "PAYLOADMARK") {
			t.Errorf("last error %q, want the handler's whole error stored", ev.LastError)
		}
		waitFor(t, "the dead event's log line", func() bool { return strings.Contains(logs.String(), "event dead") })
		if strings.Contains(logs.String(), "PAYLOADMARK") || !strings.Contains(logs.String(), "committed or rolled back Ferry's transaction itself") || !strings.Contains(logs.String(), "downstream said: [redacted]") {
			t.Errorf("the log line is not Ferry's explanation with the handler's Redacted:\n%s", logs.String())
		}
	})

	withClient(t, "TheClientsOwnStoreWorks", false, func(t *testing.T, b *clientBundle) {
		id := b.receive(t, "stripe", "evt_1")
		c := b.newClient(t, nil)
		ferry.HandleTx(c, b.store, "stripe", "", func(ctx context.Context, tx *sql.Tx, _ *ferry.Delivery) error {
			_, err := tx.ExecContext(ctx, `SELECT 1`)
			return err
		})
		start(t, c)
		b.waitState(t, id, ferry.StateDone)
		b.wantLedger(t, id, "[done]")
	})
}

// panicInHandler panics with v, a frame the stack in the log must name.
func panicInHandler(v any) { panic(v) }

// redactedError is an error whose full text must not be logged.
type redactedError struct{ full, redacted string }

func (e redactedError) Error() string    { return e.full }
func (e redactedError) Redacted() string { return e.redacted }

// Only the store's ErrTxDone and ErrLeaseLost mean a transactional handler
// ended tx or the event's lease lapsed. The same sentinels in a handler's own
// error (from its own store calls: another lease's CheckpointPut) are an
// ordinary failure, of either kind of handler: rolled back, recorded,
// retried (or dead, if Permanent).
func TestTheHandlersOwnSentinelsAreFailures(t *testing.T) {
	t.Parallel()
	b := setupClient(t, false)
	if _, err := b.store.DB().ExecContext(b.ctx, `CREATE TABLE effect (event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	fails := map[string]error{
		"evt_tx_done":    fmt.Errorf("its own tx: %w", ferry.ErrTxDone),
		"evt_lease_lost": fmt.Errorf("checkpoint: %w", ferry.ErrLeaseLost),
		"evt_permanent":  ferry.Permanent(fmt.Errorf("checkpoint: %w", ferry.ErrLeaseLost)),
	}
	want := map[string]ferry.State{"evt_tx_done": ferry.StateDone, "evt_lease_lost": ferry.StateDone, "evt_permanent": ferry.StateDead}
	type event struct{ source, id string }
	ids := map[event]int64{}
	for _, source := range []string{"stripe", "github"} {
		for id := range fails {
			ids[event{source, id}] = b.receive(t, source, id)
		}
	}
	var tried sync.Map
	failFirst := func(d *ferry.Delivery) error {
		if _, again := tried.LoadOrStore(event{d.Event.Source, d.Event.EventID}, true); again {
			return nil
		}
		return fails[d.Event.EventID]
	}
	c := b.newClient(t, func(cfg *ferry.Config) {
		cfg.Sources = []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: 2}, {Name: "github", MaxAttempts: 2}}
	})
	ferry.HandleTx(c, b.store, "stripe", "", func(ctx context.Context, tx *sql.Tx, d *ferry.Delivery) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO effect (event_id) VALUES (?)`, d.Event.EventID); err != nil {
			return err
		}
		return failFirst(d)
	})
	c.Handle("github", func(_ context.Context, d *ferry.Delivery) error { return failFirst(d) })
	start(t, c)
	for e, id := range ids {
		ev := b.waitState(t, id, want[e.id])
		b.wantLedger(t, ev.ID, map[ferry.State]string{ferry.StateDone: "[failed done]", ferry.StateDead: "[dead]"}[ev.State])
		if e.source != "stripe" {
			continue
		}
		var effects int
		if err := b.store.DB().QueryRowContext(b.ctx, `SELECT count(*) FROM effect WHERE event_id = ?`, e.id).Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if wantEffects := map[ferry.State]int{ferry.StateDone: 1, ferry.StateDead: 0}[ev.State]; effects != wantEffects {
			t.Errorf("%s: %d effects, want %d (the failed attempt's rolled back)", e.id, effects, wantEffects)
		}
	}
}

// What would silently not do what was asked is refused: a policy for a
// source no handler works, and a second handler for the same source and
// type.
func TestRegistrationMistakes(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *ferry.Delivery) error { return nil }

	withClient(t, "PolicyWithoutHandlerIsRefusedAtStart", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, func(cfg *ferry.Config) {
			cfg.Sources = []ferry.SourcePolicy{{Name: "Stripe", MaxAttempts: 1, LostLease: ferry.LostLeaseHold}}
		})
		c.Handle("stripe", noop)
		err := wantStartRefused(t, c)
		if !strings.Contains(err.Error(), `"Stripe"`) {
			t.Errorf("Start = %v, want the policy's source named", err)
		}
	})

	// As http.ServeMux does: a nil handler would fail every event of its
	// source with a nil-pointer panic.
	withClient(t, "NilHandlerPanics", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, nil)
		for name, register := range map[string]func(){
			"Handle":     func() { c.Handle("stripe", nil) },
			"HandleType": func() { c.HandleType("stripe", "invoice.paid", nil) },
			"HandleTx":   func() { ferry.HandleTx(c, b.store, "stripe", "", ferry.TxHandlerFunc[*sql.Tx](nil)) },
		} {
			wantPanic(t, name+" with nil", "nil handler", register)
		}
	})

	// Every registration after Start panics, a HandleTx on another store
	// too: Start, which would have refused it, has already run.
	withClient(t, "AWrongStoreAfterStartPanics", false, func(t *testing.T, b *clientBundle) {
		other := setupClient(t, false)
		c := b.newClient(t, nil)
		c.Handle("github", noop)
		start(t, c)
		wantPanic(t, "HandleTx on another store after Start", "after Start", func() {
			ferry.HandleTx(c, other.store, "stripe", "", func(context.Context, *sql.Tx, *ferry.Delivery) error { return nil })
		})
	})

	// Two policies for one source: which would win is not what was asked.
	withClient(t, "TwoPoliciesForOneSourceAreRefused", false, func(t *testing.T, b *clientBundle) {
		_, err := ferry.NewClient(&ferry.Config{Store: b.store, Sources: []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: 3}, {Name: "stripe", LostLease: ferry.LostLeaseHold}}})
		if !errors.Is(err, ferry.ErrInvalidParams) || !strings.Contains(err.Error(), `"stripe"`) {
			t.Errorf("NewClient with two policies for stripe = %v, want ErrInvalidParams naming it", err)
		}
	})

	// A nil store of a concrete type is not "v == nil": NewClient refuses
	// it, rather than Start's goroutine panicking on it.
	t.Run("ANilStoreIsRefused", func(t *testing.T) {
		t.Parallel()
		if _, err := ferry.NewClient(&ferry.Config{Store: (*sqlite.Store)(nil)}); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("NewClient with a nil *sqlite.Store = %v, want ErrInvalidParams", err)
		}
	})

	withClient(t, "StartAfterStopIsRefused", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, nil)
		c.Handle("stripe", noop)
		if err := c.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(b.ctx); err != nil {
			t.Fatal(err)
		}
		if err := wantStartRefused(t, c); !strings.Contains(err.Error(), "stopped client cannot be started again") {
			t.Errorf("Start after Stop = %v, want it to say a stopped client cannot start again", err)
		}
	})

	withClient(t, "SecondHandlerPanics", false, func(t *testing.T, b *clientBundle) {
		c := b.newClient(t, nil)
		ferry.HandleTx(c, b.store, "stripe", "invoice.paid", func(context.Context, *sql.Tx, *ferry.Delivery) error { return nil })
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "already registered") {
				t.Errorf("a second handler for stripe/invoice.paid: recovered %v, want a panic", p)
			}
		}()
		c.HandleType("stripe", "invoice.paid", noop)
	})
}

// wantPanic checks that register panics with a message containing want.
func wantPanic(t *testing.T, what, want string, register func()) {
	t.Helper()
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), want) {
			t.Errorf("%s: recovered %v, want a panic saying %q", what, p, want)
		}
	}()
	register()
}

// wantStartRefused checks that c does not start, with ErrInvalidParams.
func wantStartRefused(t *testing.T, c *ferry.Client) error {
	t.Helper()
	err := c.Start(context.Background())
	if err == nil {
		_ = c.Stop(context.Background())
	}
	if !errors.Is(err, ferry.ErrInvalidParams) {
		t.Fatalf("Start = %v, want ErrInvalidParams", err)
	}
	return err
}
