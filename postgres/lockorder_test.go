package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/storetest"
)

// Statements that lock several event rows lock them in id order, or skip
// what another holds: two of them never wait on each other in a cycle,
// which PostgreSQL breaks by failing one (deadlock detected). Each test
// holds a row lock in a session of its own (blocker) to line the
// statements up in the order that would close a cycle.

// lockOrderStore is a store whose sessions are named, so that a test can
// see them wait on a lock, beside a pool of the same schema for the
// blocker.
func lockOrderStore(t *testing.T, config *postgres.Config) (*postgres.Store, *pgxpool.Pool, func(n int) bool) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	name := "ferry_lockorder_" + schema
	st := teststore.PostgresOn(t, pgtest.PoolOn(t, schema, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = name
	}), config)
	waiting := func(n int) bool {
		var got int
		err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, name).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		return got >= n
	}
	return st, pool, waiting
}

// blockRow locks row id of table in a transaction of its own until the
// returned func commits it.
func blockRow(t *testing.T, pool *pgxpool.Pool, table string, id int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once bool
	release = func() {
		if !once {
			once = true
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(release)
	if _, err := tx.Exec(ctx, `SELECT id FROM `+table+` WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	return release
}

// wantUnlocked checks that no transaction holds row id of table: a lock
// taken without waiting gets it.
func wantUnlocked(t *testing.T, pool *pgxpool.Pool, table string, id int64, what string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `SELECT id FROM `+table+` WHERE id = $1 FOR UPDATE NOWAIT`, id); err != nil {
		t.Errorf("%s: %v; want it not locked", what, err)
	}
}

// whileBlocked runs op while a session of its own holds row first of
// blocked, waits (wait) until op waits on it, checks that row second of
// probed is free then (free), lets the row go and returns op's error.
func whileBlocked(t *testing.T, pool *pgxpool.Pool, waiting func(n int) bool, blocked string, first int64, probed string, second int64, wait, free string, op func() error) error {
	t.Helper()
	release := blockRow(t, pool, blocked, first)
	done := inBackground(op)
	until(t, wait, func() bool { return waiting(1) })
	wantUnlocked(t, pool, probed, second, free)
	release()
	return <-done
}

// until polls cond within a ceiling only a statement stuck for good
// exceeds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// A bulk requeue locks dead before unknown rows if it follows the state
// index; a resolve locks by id. With event 1 unknown and event 2 dead, a
// resolve of both that holds 1 and a requeue that held 2 would each wait
// for the other.
func TestRequeueBesideResolveLocksInIDOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, waiting := lockOrderStore(t, nil)
	first, second := receiveTwo(t, st, "evt_1", "evt_2")
	// 2 is dead before 1 is unknown: its row also comes first in the heap.
	execSQL(t, pool, `UPDATE ferry_event SET state = 'dead' WHERE id = $1`, second)
	execSQL(t, pool, `UPDATE ferry_event SET state = 'unknown' WHERE id = $1`, first)
	release := blockRow(t, pool, "ferry_event", first)

	resolved := inBackground(func() error {
		_, err := st.EventResolve(ctx, &ferry.EventResolveParams{IDs: []int64{first, second}, Actor: "alice"})
		return err
	})
	until(t, "the resolve to wait on event 1", func() bool { return waiting(1) })
	requeued := inBackground(func() error {
		_, err := st.EventRequeue(ctx, &ferry.EventRequeueParams{Actor: "bob"})
		return err
	})
	until(t, "the requeue to wait", func() bool { return waiting(2) })
	release()
	if err := <-resolved; err != nil {
		t.Errorf("resolve: %v", err)
	}
	if err := <-requeued; err != nil {
		t.Errorf("requeue: %v", err)
	}
}

// A requeue locks the live events it takes before it takes archived ones,
// as a receipt counts a delivery on a live event before an archived one:
// a requeue of event 1 (dead) and event 2 (done, archived) that held 2
// while it waited for 1 would wait on a batch of both that held 1.
func TestRequeueLocksLiveEventsBeforeTheArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, waiting := lockOrderStore(t, nil)
	first, second := receiveTwo(t, st, "evt_1", "evt_2")
	execSQL(t, pool, `UPDATE ferry_event SET state = 'dead' WHERE id IN ($1, $2)`, first, second)
	if _, err := st.EventResolve(ctx, &ferry.EventResolveParams{IDs: []int64{second}, Actor: "alice"}); err != nil {
		t.Fatal(err)
	}
	err := whileBlocked(t, pool, waiting, "ferry_event", first, "ferry_event_done", second, "the requeue to wait on event 1", "archived event 2 while the requeue waits for event 1", func() error {
		_, err := st.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{first, second}, Actor: "bob"})
		return err
	})
	if err != nil {
		t.Fatalf("requeue: %v", err)
	}
	wantStates(t, st, "the requeue", ferry.StatePending, first, second)
}

// A claim moves a hold source's expired leases to unknown. It skips a row
// another statement holds (a late completion of the same leases locks in
// id order, and would otherwise wait on the claim while the claim waits on
// it), and a later claim moves it.
func TestHoldClaimSkipsALockedLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := storetest.NewClock()
	st, pool, waiting := lockOrderStore(t, &postgres.Config{Now: clock.Now})
	first, second := receiveTwo(t, st, "evt_1", "evt_2")
	hold := &ferry.EventClaimManyParams{Owner: "w2", Limit: 10, TTL: time.Minute, HoldSources: []string{"stripe"}}
	if claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w1", Limit: 10, TTL: time.Minute}); err != nil || len(claims) != 2 {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	clock.Advance(2 * time.Minute)
	release := blockRow(t, pool, "ferry_event", first)

	claimed := inBackground(func() error {
		_, err := st.EventClaimMany(ctx, hold)
		return err
	})
	var err error
	until(t, "the claim to return or wait", func() bool {
		select {
		case err = <-claimed:
			return true
		default:
			if waiting(1) {
				release()
				err = <-claimed
				t.Errorf("the claim waited on a row another statement held")
				return true
			}
			return false
		}
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if got := eventOf(t, st, second).State; got != ferry.StateUnknown {
		t.Errorf("event 2 after the claim: %s, want unknown", got)
	}
	if got := eventOf(t, st, first).State; got != ferry.StateInProgress {
		t.Errorf("event 1, locked elsewhere, after the claim: %s, want in_progress", got)
	}
	release()
	if _, err := st.EventClaimMany(ctx, hold); err != nil {
		t.Fatal(err)
	}
	if got := eventOf(t, st, first).State; got != ferry.StateUnknown {
		t.Errorf("event 1 after the next claim: %s, want unknown", got)
	}
}

// A receipt batch locks its known keys' events in id order, as a
// completion does, and counts its deliveries on archived events in id
// order, as a requeue or a purge of archived events locks them, though it
// names them in key order (one statement) or stores them in arrival order
// (a batch with a replay window, one statement a receipt): with "a" on
// event 2 before "b" on event 1, it would hold 2 while it waits for 1, and
// a completion (or a bulk replay) of both that holds 1 would wait for it in
// turn.
func TestReceiveManyLocksInIDOrder(t *testing.T) {
	t.Parallel()
	// Each gives a store whose events 1 ("b") and 2 ("a") have their rows
	// in the table named, 2's first in the heap.
	events := map[string]func(t *testing.T) (*postgres.Store, *pgxpool.Pool, func(int) bool, string, int64, int64){
		"Live": func(t *testing.T) (*postgres.Store, *pgxpool.Pool, func(int) bool, string, int64, int64) {
			st, pool, waiting := lockOrderStore(t, nil)
			first, second := receiveTwo(t, st, "b", "a")
			execSQL(t, pool, `UPDATE ferry_event SET deliveries = deliveries WHERE id = $1`, second)
			execSQL(t, pool, `UPDATE ferry_event SET deliveries = deliveries WHERE id = $1`, first)
			return st, pool, waiting, "ferry_event", first, second
		},
		"Archived": func(t *testing.T) (*postgres.Store, *pgxpool.Pool, func(int) bool, string, int64, int64) {
			clock := storetest.NewClock()
			st, pool, waiting := lockOrderStore(t, &postgres.Config{Now: clock.Now})
			archiveDays(t, pool, clock)
			first, second := archiveTwo(t, st, pool, clock, "b", "a")
			return st, pool, waiting, "ferry_event_done", first, second
		},
	}
	for name, setup := range events {
		for _, window := range []time.Duration{0, time.Hour} {
			t.Run(fmt.Sprintf("%s/ReplayWindow=%v", name, window), func(t *testing.T) {
				t.Parallel()
				st, pool, waiting, table, first, second := setup(t)
				err := whileBlocked(t, pool, waiting, table, first, table, second, "the receipts to wait on event 1", "event 2 while the receipts wait for event 1", func() error { return receiveBatch(st, window, "a", "b") })
				if err != nil {
					t.Errorf("receive many: %v", err)
				}
				for _, id := range []int64{first, second} {
					if got := eventOf(t, st, id).Deliveries; got != 2 {
						t.Errorf("event %d has %d deliveries, want 2", id, got)
					}
				}
			})
		}
	}
}

// A receipt locks its key before its event, and a batch with a replay
// window locks its known keys before their events, ahead of its receipts:
// were it to hold the event while it waits for the key, a lone receipt of
// the key queued ahead of it would take the key, then wait for the event.
func TestReceiptBatchLocksKeysBeforeEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, waiting := lockOrderStore(t, nil)
	id := receive(t, st, "stripe", "evt_1", "{}").ID
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ferry_event_key WHERE source = 'stripe' AND event_id = 'evt_1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	batched := inBackground(func() error { return receiveBatch(st, time.Hour, "evt_2", "evt_1") })
	until(t, "the batch to wait on evt_1's key", func() bool { return waiting(1) })
	wantUnlocked(t, pool, "ferry_event", id, "evt_1's event while the batch waits for its key")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-batched; err != nil {
		t.Errorf("the batch: %v", err)
	}
	if got := eventOf(t, st, id).Deliveries; got != 2 {
		t.Errorf("evt_1 has %d deliveries, want 2", got)
	}
}

// A batch with a replay window takes the archive's table lock its
// receipts' counts need before it locks an archived row, as a single
// statement takes its table locks as it is planned: archive maintenance
// holds a lock on the table that stops those counts while it moves rows
// out of the default partition (and attaches a partition, which waits for
// every lock on it), so a batch holding archived rows while it waited on
// the table would close a cycle.
func TestReceiveManyTakesTheArchiveTableLockFirst(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	st, pool, waiting := lockOrderStore(t, &postgres.Config{Now: clock.Now})
	archiveDays(t, pool, clock)
	first, second := archiveTwo(t, st, pool, clock, "b", "a")
	ctx := context.Background()
	maintenance, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer maintenance.Rollback(ctx)
	if _, err := maintenance.Exec(ctx, `LOCK TABLE ferry_event_done IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	received := inBackground(func() error { return receiveBatch(st, time.Hour, "a", "b") })
	until(t, "the batch to wait on the archive's table lock", func() bool { return waiting(1) })
	for _, id := range []int64{first, second} {
		wantUnlocked(t, pool, "ferry_event_done", id, fmt.Sprintf("archived event %d while the batch waits on the table", id))
	}
	if err := maintenance.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-received; err != nil {
		t.Errorf("receive many: %v", err)
	}
}

// A purge deletes a source's archived events in id order, as a redelivery
// or a requeue of archived events locks them, though it finds them by
// completion time: with event 2 completed before event 1, it would hold 2
// while it waits for 1, and a receipt batch counting deliveries on both
// that holds 1 would wait for it in turn.
func TestPurgeLocksArchivedEventsInIDOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := storetest.NewClock()
	st, pool, waiting := lockOrderStore(t, &postgres.Config{Now: clock.Now})
	archiveDays(t, pool, clock)
	first, second := archiveTwo(t, st, pool, clock, "evt_1", "evt_2")
	clock.Advance(2 * time.Hour)
	var n int
	err := whileBlocked(t, pool, waiting, "ferry_event_done", first, "ferry_event_done", second, "the purge to wait on archived event 1", "archived event 2 while the purge waits for event 1", func() (err error) {
		n, err = st.EventPurge(ctx, &ferry.EventPurgeParams{Source: "stripe", Retention: time.Hour, ReplayWindow: time.Hour})
		return err
	})
	if err != nil || n != 2 {
		t.Errorf("purge = %d, %v; want 2", n, err)
	}
}

// Maintenance deletes the default partition's archived events past
// retention in id order too, whatever their order in its heap.
func TestArchiveDefaultPurgeLocksInIDOrder(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	st, pool, waiting := lockOrderStore(t, &postgres.Config{Now: clock.Now})
	// No maintenance has run: both are in the default partition, 2 first.
	first, second := archiveTwo(t, st, pool, clock, "evt_1", "evt_2")
	clock.Advance(2 * time.Hour)
	var n int
	err := whileBlocked(t, pool, waiting, "ferry_event_done", first, "ferry_event_done", second, "the purge to wait on archived event 1", "archived event 2 while the purge waits for event 1", func() error {
		return st.Pool().QueryRow(context.Background(), postgres.ArchiveDefaultPurgeSQL, pgx.NamedArgs{
			"now": clock.Now(), "retention_us": time.Hour.Microseconds(),
		}).Scan(&n)
	})
	if err != nil || n != 2 {
		t.Errorf("default partition's purge = %d, %v; want 2", n, err)
	}
}

// A bulk replay of done events takes them out of the archive in id order,
// as a redelivery or a purge of archived events locks them, though it reads
// them in the archive's order: with event 2 archived before event 1, it
// would hold 2 while it waits for 1, and a receipt batch counting
// deliveries on both that holds 1 would wait for it in turn.
func TestRequeueLocksArchivedEventsInIDOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := storetest.NewClock()
	st, pool, waiting := lockOrderStore(t, &postgres.Config{Now: clock.Now})
	archiveDays(t, pool, clock)
	first, second := archiveTwo(t, st, pool, clock, "evt_1", "evt_2")
	err := whileBlocked(t, pool, waiting, "ferry_event_done", first, "ferry_event_done", second, "the requeue to wait on archived event 1", "archived event 2 while the requeue waits for event 1", func() error {
		_, err := st.EventRequeue(ctx, &ferry.EventRequeueParams{States: []ferry.State{ferry.StateDone}, Actor: "bob"})
		return err
	})
	if err != nil {
		t.Fatalf("requeue: %v", err)
	}
	wantStates(t, st, "the requeue", ferry.StatePending, first, second)
}

// Maintenance moving a past day's rows out of the default partition takes
// that partition's table lock before it locks a row: the attach that
// follows waits for every lock on the partition, so a receipt holding one
// while it waited for a moved row would close a cycle, whatever the rows'
// order.
func TestArchiveCreateLocksTheDefaultPartitionFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := storetest.NewClock()
	st, pool, waiting := lockOrderStore(t, &postgres.Config{Now: clock.Now})
	// Both in the default partition, 2's row first in the heap: the move's
	// first. Two days ago, so the parents are not locked.
	first, second := archiveTwo(t, st, pool, clock, "evt_1", "evt_2")
	day := clock.Now().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	clock.Advance(3 * 24 * time.Hour)
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	var pid int
	if err := blocker.QueryRow(ctx, `SELECT pg_backend_pid() FROM ferry_event_done WHERE id = $1 FOR UPDATE`, first).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	moved := inBackground(func() error {
		var created bool
		return st.Pool().QueryRow(ctx, `SELECT ferry_archive_create($1::date, $2::date, $3)`, day, day.Add(48*time.Hour), clock.Now()).Scan(&created)
	})
	until(t, "the move to wait", func() bool { return waiting(1) })
	// On the table lock, holding no row; a probe of event 2's row would
	// queue behind it. Moving rows first, it would wait on event 1's row
	// (for its transaction), holding event 2's.
	var on string
	if err := pool.QueryRow(ctx, `SELECT wait_event FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&on); err != nil || on != "relation" {
		t.Errorf("the move waits on %q (%v), want the default partition's table lock (relation)", on, err)
	}
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-moved; err != nil {
		t.Fatalf("archive create: %v", err)
	}
	wantStates(t, st, "the move", ferry.StateDone, first, second)
}

// wantStates checks that each event of ids is in state want after what.
func wantStates(t *testing.T, st *postgres.Store, what string, want ferry.State, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		if got := eventOf(t, st, id).State; got != want {
			t.Errorf("event %d after %s: %s, want %s", id, what, got, want)
		}
	}
}

// archiveTwo receives stripe events keyed first and second (their ids
// ascend) and resolves them, second first, the last second before a UTC
// midnight on clock and at that midnight: 2's archived row comes first in
// the heap, and completed first. If the archive has partitions of those
// days (archiveDays), 2's is the earlier, whose rows a scan of the archive
// reads first.
func archiveTwo(t *testing.T, st *postgres.Store, pool *pgxpool.Pool, clock *storetest.Clock, first, second string) (int64, int64) {
	t.Helper()
	a, b := receiveTwo(t, st, first, second)
	execSQL(t, pool, `UPDATE ferry_event SET state = 'dead' WHERE id IN ($1, $2)`, a, b)
	now := clock.Now()
	clock.Advance(now.Truncate(24 * time.Hour).Add(24*time.Hour - time.Second).Sub(now))
	for _, id := range []int64{b, a} {
		if _, err := st.EventResolve(context.Background(), &ferry.EventResolveParams{IDs: []int64{id}, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	return a, b
}

// archiveDays gives the archive a partition of clock's UTC day and one of
// the next, as maintenance creates them.
func archiveDays(t *testing.T, pool *pgxpool.Pool, clock *storetest.Clock) {
	t.Helper()
	day := clock.Now().Truncate(24 * time.Hour)
	for _, from := range []time.Time{day, day.Add(24 * time.Hour)} {
		execSQL(t, pool, `SELECT ferry_archive_create($1::date, $2::date, $3)`, from, from.Add(24*time.Hour), clock.Now())
	}
}

// receiveTwo receives stripe events keyed first and second, in that order:
// their ids ascend.
func receiveTwo(t *testing.T, st *postgres.Store, first, second string) (int64, int64) {
	t.Helper()
	return receive(t, st, "stripe", first, "{}").ID, receive(t, st, "stripe", second, "{}").ID
}

// receiveBatch receives stripe deliveries of ids, body {}, in one
// EventReceiveMany: its error, or the first receipt's.
func receiveBatch(st *postgres.Store, window time.Duration, ids ...string) error {
	var batch []*ferry.EventReceiveParams
	for _, id := range ids {
		batch = append(batch, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(`{}`), ReplayWindow: window})
	}
	results, err := st.EventReceiveMany(context.Background(), &ferry.EventReceiveManyParams{Receipts: batch})
	for _, r := range results {
		if err == nil && r.Err != nil {
			err = r.Err
		}
	}
	return err
}

// inBackground runs f in a goroutine of its own; its error comes on the
// channel.
func inBackground(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

func eventOf(t *testing.T, st *postgres.Store, id int64) *ferry.Event {
	t.Helper()
	ev, err := st.EventGet(context.Background(), &ferry.EventGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func execSQL(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}
