package ferry_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/testlog"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/storetest"
)

// Transactional handlers each hold a connection while they run: on a pool
// smaller than the Workload, heartbeats and verdicts would wait behind
// them until leases lapse and effects repeat. Start refuses it, naming the
// size needed; a pool that size starts.
func TestClientTxHandlersNeedTheirPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)
	const workers = 8
	need := ferry.Workload{Workers: workers, TxHandlers: true}.Conns()
	overhead := need - workers // what the client needs besides its workers
	for _, tc := range []struct{ workers, size int }{{workers, 4}, {workers, need - 2}, {workers, need}, {0, 20}} {
		pool := pgtest.PoolOn(t, schema, func(c *pgxpool.Config) { c.MaxConns = int32(tc.size) })
		st := teststore.PostgresOn(t, pool, nil)
		c, err := ferry.NewClient(&ferry.Config{Store: st, Workers: tc.workers, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ferry.HandleTx(c, ferry.TxStore[pgx.Tx](st), "stripe", "", func(context.Context, pgx.Tx, *ferry.Delivery) error { return nil })
		err = c.Start(ctx)
		if err == nil {
			_ = c.Stop(ctx)
		}
		size, need := tc.size, ferry.Workload{Workers: cmp.Or(tc.workers, ferry.DefaultWorkers), TxHandlers: true}.Conns()
		switch {
		case size < need && (!errors.Is(err, ferry.ErrInvalidParams) || !strings.Contains(err.Error(), fmt.Sprintf("need %d", need))):
			t.Errorf("a pool of %d: Start = %v, want ErrInvalidParams naming %d connections", size, err, need)
		case size < need && !strings.Contains(err.Error(), "max_connections"):
			// The default Workers need more than PostgreSQL's default
			// max_connections (100) allows.
			t.Errorf("a pool of %d: Start = %v, want the server's max_connections named", size, err)
		case size == 4 && !strings.Contains(err.Error(), fmt.Sprintf("lower Config.Workers and raise MaxConns to Workers+%d: no Workers value fits 4", overhead)):
			t.Errorf("a pool of 4: Start = %v; no Workers fit it (0 would mean the default), want the pool a smaller Workers needs", err)
		case size < need && size > 4 && !strings.Contains(err.Error(), fmt.Sprintf("lower Config.Workers to %d", size-overhead)):
			t.Errorf("a pool of %d: Start = %v, want the Workers that fit", size, err)
		case size >= need && err != nil:
			t.Errorf("a pool of %d (the Workload's): Start = %v", size, err)
		}
	}
}

// A transactional handler that commits Ferry's transaction itself has its
// writes committed without the event's done: the event goes dead at its
// first attempt, saying why, rather than committing them again with every
// retry until the budget is spent.
func TestClientTxHandlerThatCommitsIsDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)
	pool := pgtest.PoolOn(t, schema, func(c *pgxpool.Config) {
		c.MaxConns = int32(ferry.Workload{Workers: 1, TxHandlers: true}.Conns())
	})
	st := teststore.PostgresOn(t, pool, nil)
	if _, err := pool.Exec(ctx, `CREATE TABLE effect (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// evt_1's handler commits and returns nil; evt_2's commits, then fails
	// on the ended tx.
	var ids []int64
	for _, id := range []string{"evt_1", "evt_2"} {
		res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	c, err := ferry.NewClient(&ferry.Config{
		Store: st, Workers: 1, PollInterval: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryCap: time.Millisecond,
		Sources: []ferry.SourcePolicy{{Name: "stripe", MaxAttempts: 3}},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ferry.HandleTx(c, ferry.TxStore[pgx.Tx](st), "stripe", "", func(ctx context.Context, tx pgx.Tx, d *ferry.Delivery) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effect (event_id) VALUES ($1)`, d.Event.EventID); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil || d.Event.EventID == "evt_1" {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(ctx) })
	for _, id := range ids {
		deadline := time.Now().Add(30 * time.Second) // a ceiling for a loaded machine
		var ev *ferry.Event
		for {
			if ev, err = st.EventGet(ctx, &ferry.EventGetParams{ID: id}); err != nil {
				t.Fatal(err)
			}
			if ev.State == ferry.StateDead {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is %s at attempt %d (%q), want dead", ev.EventID, ev.State, ev.Attempt, ev.LastError)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ev.Attempt != 1 || !strings.Contains(ev.LastError, "committed or rolled back Ferry's transaction") || !strings.Contains(ev.LastError, ferry.ErrTxDone.Error()) {
			t.Errorf("%s: dead at attempt %d with %q, want at its first, saying the handler ended the transaction", ev.EventID, ev.Attempt, ev.LastError)
		}
		var effects int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM effect WHERE event_id = $1`, ev.EventID).Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if effects != 1 {
			t.Errorf("%s: %d effects, want 1", ev.EventID, effects)
		}
	}
}

// A zombie worker (paused past its leases, then awake and writing) and a live
// one race over the same events with a transactional handler: every event's
// effect lands exactly once, because the zombie's fenced done fails and takes
// its writes down with it.
func TestClientTxHandlerExactlyOnceUnderZombie(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)
	const events = 10
	// A transactional handler holds a connection while it runs: two clients
	// of ten workers each share the pool.
	pool := pgtest.PoolOn(t, schema, func(c *pgxpool.Config) {
		c.MaxConns = int32(2 * ferry.Workload{Workers: events, TxHandlers: true}.Conns())
	})
	clock := storetest.NewClock()
	st := teststore.PostgresOn(t, pool, &postgres.Config{Now: clock.Now})
	if _, err := pool.Exec(ctx, `CREATE TABLE effect (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: fmt.Sprint("evt_", i), Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	effect := func(ctx context.Context, tx pgx.Tx, d *ferry.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO effect (event_id) VALUES ($1)`, d.Event.EventID)
		return err
	}
	newClient := func(ttl time.Duration) *ferry.Client {
		c, err := ferry.NewClient(&ferry.Config{
			Store: st, Workers: events, LeaseTTL: ttl, PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	paused, wake := make(chan struct{}, events), make(chan struct{})
	var wakeOnce sync.Once
	wakeZombie := func() { wakeOnce.Do(func() { close(wake) }) }
	zombie := newClient(time.Hour) // its first heartbeat would come after 20 minutes
	ferry.HandleTx(zombie, ferry.TxStore[pgx.Tx](st), "stripe", "", func(_ context.Context, tx pgx.Tx, d *ferry.Delivery) error {
		paused <- struct{}{}
		<-wake
		return effect(context.Background(), tx, d) // writes regardless of its context
	})
	if err := zombie.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Runs before pool.Close (cleanups run last first): a paused zombie
	// holds connections the pool would wait for forever.
	t.Cleanup(func() { wakeZombie(); _ = zombie.Stop(ctx) })
	for i := range events {
		select {
		case <-paused:
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d zombie handlers started", i, events)
		}
	}
	clock.Advance(2 * time.Hour) // the database now says every zombie lease is over

	live := newClient(time.Minute)
	ferry.HandleTx(live, ferry.TxStore[pgx.Tx](st), "stripe", "", effect)
	if err := live.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Stop(ctx) })
	deadline := time.Now().Add(60 * time.Second) // a ceiling for a loaded machine
	for {
		page, err := st.EventList(ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateDone}})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) == events {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events done", len(page.Events), events)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wakeZombie()
	_ = zombie.Stop(ctx)
	_ = live.Stop(ctx)

	rows, err := pool.Query(ctx, `SELECT event_id, count(*) FROM effect GROUP BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID string
		N  int
	}])
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != events {
		t.Fatalf("%d events have effects, want %d", len(counts), events)
	}
	for _, c := range counts {
		if c.N != 1 {
			t.Errorf("%s has %d effects, want exactly 1", c.ID, c.N)
		}
	}
}

// A client started before its schema exists (or while its database is
// down) polls, and subscribes to receipts once it can: with a poll of an
// hour, only the subscription made after Migrate can bring this event in.
func TestClientSubscribesOnceTheStoreCanNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := pgtest.Schema(t)
	st := postgres.New(pgtest.PoolOn(t, schema, nil), nil)
	t.Cleanup(st.Close)
	var logs testlog.Buffer
	c, err := ferry.NewClient(&ferry.Config{Store: st, PollInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 1)
	c.Handle("stripe", func(_ context.Context, d *ferry.Delivery) error {
		handled <- d.Event.EventID
		return nil
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(ctx) })
	waitFor(t, "the first subscription to fail", func() bool {
		return strings.Contains(logs.String(), "receipt notifications unavailable")
	})
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-handled:
		if id != "evt_1" {
			t.Fatalf("handled %s, want evt_1", id)
		}
	case <-time.After(2 * time.Minute): // the retries' cap is 30 s
		t.Fatal("the event was not handled: the client never subscribed to receipts")
	}
}
