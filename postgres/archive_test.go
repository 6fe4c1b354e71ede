package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/storetest"
)

type archiveBundle struct {
	ctx   context.Context
	clock *storetest.Clock
	store *postgres.Store
}

func archiveSetup(t *testing.T) *archiveBundle {
	t.Helper()
	clock := storetest.NewClock()
	st := teststore.Postgres(t, &postgres.Config{Now: clock.Now})
	return &archiveBundle{ctx: context.Background(), clock: clock, store: st}
}

// claimed receives eventID (its payload is its name) and claims it.
func (b *archiveBundle) claimed(t *testing.T, eventID string) ferry.Lease {
	t.Helper()
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: eventID, Payload: []byte(eventID)})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
	if err != nil || len(claims) != 1 || claims[0].Event.ID != res.ID {
		t.Fatalf("claim of %s: %d claims, %v", eventID, len(claims), err)
	}
	return claims[0].Event.Lease()
}

// done receives eventID, claims it and completes it now.
func (b *archiveBundle) done(t *testing.T, eventID string) int64 {
	t.Helper()
	lease := b.claimed(t, eventID)
	if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	return lease.ID
}

// maintain runs maintenance with p, failing t on an error.
func (b *archiveBundle) maintain(t *testing.T, p *ferry.ArchiveMaintainParams) *ferry.ArchiveMaintainResult {
	t.Helper()
	res, err := b.store.ArchiveMaintain(b.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// doneKeyKept creates partitions ahead with maintenance that keeps events a
// day and keys 30 days, and completes x in today's partition: a run three
// days on drops x's day and keeps its key. It returns that maintenance and
// x's id.
func (b *archiveBundle) doneKeyKept(t *testing.T) (*ferry.ArchiveMaintainParams, int64) {
	t.Helper()
	p := &ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour, KeyRetention: 30 * 24 * time.Hour}
	b.maintain(t, p)
	return p, b.done(t, "x")
}

func (b *archiveBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.store.Pool().QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCount polls sql until it counts at least n, failing after a minute.
func (b *archiveBundle) waitCount(t *testing.T, n int, sql string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); b.count(t, sql, args...) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, fewer than %d rows of %s", n, sql)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *archiveBundle) doneCount(t *testing.T) int {
	t.Helper()
	stats, err := b.store.EventStats(b.ctx, &ferry.EventStatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats.Sources {
		if s.Source == "s" {
			return s.States[ferry.StateDone]
		}
	}
	return 0
}

// droppableDay completes x three days ago, keeps a conflicting delivery of
// it, and creates partitions ahead, so that a run with a 24-hour retention
// only drops x's day. It returns x's row id.
func (b *archiveBundle) droppableDay(t *testing.T) int64 {
	t.Helper()
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: time.Hour})
	x := b.done(t, "x")
	if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte("other bytes")}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(72 * time.Hour)
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 30 * 24 * time.Hour})
	return x
}

// lockConflicts begins a transaction that locks event id's conflict rows,
// rolled back at the test's end unless committed, and returns it with its
// backend's pid.
func (b *archiveBundle) lockConflicts(t *testing.T, id int64) (pgx.Tx, int) {
	t.Helper()
	tx, err := b.store.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(b.ctx, `SELECT FROM ferry_conflict WHERE event_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// waiter blocks until a statement whose text holds marker waits for a lock
// the backend holder holds, and returns its backend. Only this test's
// backends: other tests run the same statements.
func (b *archiveBundle) waiter(t *testing.T, holder int, marker string) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var pid int
		err := b.store.Pool().QueryRow(b.ctx, `
			SELECT pid FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%' || $2 || '%'`, holder, marker).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, no %s waits on backend %d", marker, holder)
		}
	}
}

// Maintenance creates partitions ahead (moving completions out of the
// default partition), then drops a whole partition once it is older than
// the retention, with its events' ledger and conflicts and their done
// count; a key outlives its event by no more than the key retention.
func TestArchiveMaintainCreatesAndDrops(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	day0 := b.done(t, "a")
	if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "a", Payload: []byte("other")}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(24 * time.Hour)
	day1 := b.done(t, "b")
	b.clock.Advance(24 * time.Hour)
	day2 := b.done(t, "c")
	if n := b.count(t, `SELECT count(*) FROM ferry_event_done_default`); n != 3 {
		t.Fatalf("%d events in the default partition before maintenance, want 3", n)
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_attempt_done_default`); n != 3 {
		t.Fatalf("%d ledger rows in the default partition before maintenance, want 3", n)
	}

	params := &ferry.ArchiveMaintainParams{Owner: "m", Retention: 30 * time.Hour, Ahead: 48 * time.Hour}
	res := b.maintain(t, params)
	// Retention starts on day 0 (now − 30 h), partitions run to day 4.
	if res.Created != 5 || res.Dropped != 0 {
		t.Fatalf("first run: %+v, want 5 created, none dropped", res)
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_event_done_default`); n != 0 {
		t.Fatalf("%d events left in the default partition", n)
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_attempt_done_default`); n != 0 {
		t.Fatalf("%d ledger rows left in the default partition", n)
	}
	if n := b.doneCount(t); n != 3 {
		t.Fatalf("done count %d, want 3", n)
	}

	b.clock.Advance(24 * time.Hour)
	res = b.maintain(t, params)
	if res.Created != 1 || res.Dropped != 1 || res.Events != 1 || res.Keys != 1 {
		t.Fatalf("second run: %+v, want 1 created, 1 dropped with 1 event, 1 key purged", res)
	}
	if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: day0}); !errors.Is(err, ferry.ErrNotFound) {
		t.Fatalf("event of the dropped day: %v, want ErrNotFound", err)
	}
	if n := b.count(t, `SELECT (SELECT count(*) FROM ferry_attempt WHERE event_id = $1) + (SELECT count(*) FROM ferry_attempt_done WHERE event_id = $1)`, day0); n != 0 {
		t.Errorf("%d ledger rows of a dropped event", n)
	}
	// to_regclass looks in this test's schema only: parallel tests have
	// partitions of the same name in theirs.
	if n := b.count(t, `SELECT count(to_regclass('ferry_attempt_done_20260102'))`); n != 0 {
		t.Errorf("the dropped day's ledger partition is still there")
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_conflict WHERE event_id = $1`, day0); n != 0 {
		t.Errorf("%d conflicts of a dropped event", n)
	}
	for _, id := range []int64{day1, day2} {
		if ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: id}); err != nil || ev.State != ferry.StateDone {
			t.Fatalf("kept event %d: %+v, %v", id, ev, err)
		}
		if atts, err := b.store.AttemptList(b.ctx, &ferry.AttemptListParams{ID: id}); err != nil || len(atts) != 1 || atts[0].Outcome != ferry.OutcomeDone {
			t.Fatalf("kept event %d's ledger: %+v, %v", id, atts, err)
		}
	}
	if n := b.doneCount(t); n != 2 {
		t.Fatalf("done count %d after the drop, want 2", n)
	}
	info, err := b.store.ArchiveInfo(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wantOldest := time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC); info.Partitions != 5 || !info.Oldest.Equal(wantOldest) {
		t.Fatalf("archive info %+v, want 5 partitions from %s", info, wantOldest)
	}
	// b's key is kept (its event is), a's is gone: a redelivery of a is new.
	for key, want := range map[string]ferry.ReceiveOutcome{"a": ferry.ReceiveNew, "b": ferry.ReceiveDuplicate} {
		got, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: key, Payload: []byte(key)})
		if err != nil || got.Outcome != want {
			t.Errorf("redelivery of %s: %+v, %v; want %s", key, got, err, want)
		}
	}
}

// A run that stops after today's partition (here a table stands in the way
// of the next) leaves the days before it without one; the next run still
// gives each of them a partition and empties the default partitions, with
// every event and ledger row kept once.
func TestArchiveMaintainFillsTheDaysAStoppedRunLeft(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	var ids []int64
	for _, id := range []string{"a", "b", "c"} { // Jan 2, 3 and 4
		ids = append(ids, b.done(t, id))
		b.clock.Advance(24 * time.Hour)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := b.store.Pool().Exec(b.ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// On Jan 5 the retention reaches back to Dec 26: the run creates Jan 5,
	// then fails on Dec 26.
	params := &ferry.ArchiveMaintainParams{Owner: "m", Retention: 10 * 24 * time.Hour, Ahead: 48 * time.Hour}
	exec(`CREATE TABLE ferry_event_done_20251226 (x int)`)
	if _, err := b.store.ArchiveMaintain(b.ctx, params); err == nil {
		t.Fatal("the run with a table in its way succeeded")
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_event_done_partition`); n != 1 {
		t.Fatalf("%d partitions after the stopped run, want today's alone", n)
	}
	exec(`DROP TABLE ferry_event_done_20251226`)
	b.maintain(t, params)
	for _, table := range []string{"ferry_event_done_default", "ferry_attempt_done_default"} {
		if n := b.count(t, `SELECT count(*) FROM `+table); n != 0 {
			t.Errorf("%d rows left in %s", n, table)
		}
	}
	for _, id := range ids {
		if n := b.count(t, `SELECT count(*) FROM ferry_event_done WHERE id = $1`, id); n != 1 {
			t.Errorf("event %d stored %d times", id, n)
		}
		if n := b.count(t, `SELECT count(*) FROM ferry_attempt_done WHERE event_id = $1`, id); n != 1 {
			t.Errorf("event %d has %d ledger rows", id, n)
		}
	}
	if n := b.doneCount(t); n != 3 {
		t.Errorf("done count %d, want 3", n)
	}
}

// When today is one of those days (the clock went back behind the newest
// partition), today's partition still comes first: a run that then stops
// has already given completions a partition to land in.
func TestArchiveMaintainCreatesTodayFirstAmongTheDaysLeft(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	params := &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour, Ahead: 48 * time.Hour}
	b.clock.Advance(8 * 24 * time.Hour) // Jan 10: partitions Jan 8 to 12
	b.maintain(t, params)
	b.clock.Advance(-6 * 24 * time.Hour) // back to Jan 4, then Jan 5
	b.done(t, "a")
	b.clock.Advance(24 * time.Hour)
	b.done(t, "b")
	if _, err := b.store.Pool().Exec(b.ctx, `CREATE TABLE ferry_event_done_20260104 (x int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.ArchiveMaintain(b.ctx, params); err == nil {
		t.Fatal("the run with a table in its way succeeded")
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_event_done_partition WHERE name = 'ferry_event_done_20260105'`); n != 1 {
		t.Errorf("today's day has %d partitions after a run that stopped on an older one, want 1", n)
	}
}

// One instance maintains at a time: another owner's live lease skips it.
func TestArchiveMaintainTakesTurns(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	if _, err := b.store.Pool().Exec(b.ctx, `INSERT INTO ferry_lease (name, owner, expires_at) VALUES ('ferry_archive_maintenance', 'other', $1)`,
		b.clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	params := &ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour}
	res, err := b.store.ArchiveMaintain(b.ctx, params)
	if err != nil || !res.Skipped || res.Created != 0 {
		t.Fatalf("while another holds the lease: %+v, %v; want skipped", res, err)
	}
	b.clock.Advance(time.Minute)
	if res, err := b.store.ArchiveMaintain(b.ctx, params); err != nil || res.Skipped || res.Created == 0 {
		t.Fatalf("once the lease lapsed: %+v, %v; want a run", res, err)
	}
}

// Completion moves every column to the archive and requeue moves it back;
// only the columns the transition sets change.
func TestArchiveMoveKeepsEveryColumn(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e", Type: "t",
		Payload: []byte("body"), Headers: http.Header{"X-A": {"1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Pool().Exec(b.ctx, `UPDATE ferry_event SET origin = 'catchup', traceparent = 'tp', tracestate = 'ts',
		replays = 2, last_error = 'earlier', deliveries = 3, conflicts = 1 WHERE id = $1`, res.ID); err != nil {
		t.Fatal(err)
	}
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatal(claims, err)
	}
	row := func(table string) map[string]any {
		var m map[string]any
		if err := b.store.Pool().QueryRow(b.ctx, `SELECT to_jsonb(e) - 'state' - 'lease_owner' - 'lease_expires_at' - 'completed_at'
			- 'next_attempt_at' - 'attempt_base' - 'requeued_at' FROM `+pgx.Identifier{table}.Sanitize()+` e WHERE id = $1`, res.ID).Scan(&m); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		return m
	}
	hot := row("ferry_event")
	if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()}); err != nil {
		t.Fatal(err)
	}
	archived := row("ferry_event_done")
	if len(archived) != len(hot) {
		t.Fatalf("archived row has %d columns, hot %d", len(archived), len(hot))
	}
	for k, v := range hot {
		if !jsonEqual(archived[k], v) {
			t.Errorf("column %s: %v in ferry_event, %v archived", k, v, archived[k])
		}
	}
	if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{res.ID}, Actor: "op"}); err != nil {
		t.Fatal(err)
	}
	back := row("ferry_event")
	for k, v := range hot {
		if !jsonEqual(back[k], v) {
			t.Errorf("column %s: %v before, %v after a requeue", k, v, back[k])
		}
	}
}

func jsonEqual(a, b any) bool { return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b) }

// A redelivery that meets the completion moving its event (the receipt
// waits on the event row the completion deleted, then finds it gone) is
// still counted, on the archived event.
func TestRedeliveryDuringCompletionIsCounted(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	lease := b.claimed(t, "e")
	received := make(chan error, 1)
	err := b.store.InTx(b.ctx, func(tx pgx.Tx) error {
		if err := b.store.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			return err
		}
		var pid int
		if err := tx.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		go func() {
			_, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "e", Payload: []byte("e")})
			received <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid) == 0 {
			if time.Now().After(deadline) {
				t.Error("the redelivery never waited on the completion")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-received; err != nil {
		t.Fatal(err)
	}
	ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: lease.ID})
	if err != nil || ev.State != ferry.StateDone || ev.Deliveries != 2 {
		t.Fatalf("event after the race: %+v, %v; want done with 2 deliveries", ev, err)
	}
}

// Completions landing in the default partition while maintenance creates
// their day's partition must not make the attach fail: the first
// maintenance of a fresh store runs while traffic already flows.
func TestArchiveMaintainDuringCompletions(t *testing.T) {
	t.Parallel()
	st := teststore.Postgres(t, nil) // the database's clock: completions fall on today
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s", EventID: fmt.Sprint("e", i), Payload: []byte("{}")}); err != nil {
				done <- err
				return
			}
			claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
			if err != nil {
				done <- err
				return
			}
			for _, c := range claims {
				if err := st.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()}); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for i := range 20 {
		// Each round drops today's partition again, so the next creates it
		// while completions go on.
		if _, err := st.Pool().Exec(ctx, `SELECT ferry_archive_drop(name) FROM ferry_event_done_partition`); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour, Ahead: 24 * time.Hour}); err != nil {
			t.Fatalf("maintenance %d during completions: %v", i, err)
		}
	}
}

// Maintenance creating a day ahead never waits for completions: no
// completion can land in a future range, so only the range that holds now
// takes the archive's lock. An open transaction that completed an event
// would otherwise hold it off (lock_timeout), and the first maintenance of a
// fresh store would stall completions while it creates its days.
func TestArchiveCreateAheadNeverWaitsForCompletions(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	params := &ferry.ArchiveMaintainParams{Owner: "m", Retention: 30 * 24 * time.Hour}
	b.maintain(t, params)
	lease := b.claimed(t, "e")
	err := b.store.InTx(b.ctx, func(tx pgx.Tx) error {
		if err := b.store.EventCompleteTx(b.ctx, tx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
			return err
		}
		// A day later, with a day more of retention: nothing to drop.
		b.clock.Advance(24 * time.Hour)
		m, err := b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: params.Retention + 24*time.Hour})
		if err != nil || m.Created != 1 || m.Dropped != 0 {
			t.Errorf("maintenance beside an open completion = %+v, %v; want one day created ahead", m, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: lease.ID}); err != nil || ev.State != ferry.StateDone {
		t.Fatalf("event after maintenance: %+v, %v; want done", ev, err)
	}
}

// A drop that races a requeue of one of its day's events keeps what the
// requeue brings back: the event lives again, so its kept conflicting
// delivery and its actions must too. The drop detaches the day first (which
// waits for the requeue) and only then deletes side rows, by what the day
// still holds.
func TestArchiveDropKeepsWhatARequeueBringsBack(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	x := b.droppableDay(t)

	// waiting blocks until n statements of this schema wait for a lock.
	waiting := func(n int) {
		t.Helper()
		b.waitCount(t, n, `
			SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relnamespace = current_schema()::regnamespace`)
	}
	// A slow requeue: it holds the archive's partitions while it waits for
	// the done counters.
	blocker, err := b.store.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(b.ctx)
	if _, err := blocker.Exec(b.ctx, `LOCK TABLE ferry_done_count IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	requeued := make(chan error, 1)
	go func() {
		_, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{x}, Actor: "op"})
		requeued <- err
	}()
	waiting(1)
	maintained := make(chan error, 1)
	go func() {
		_, err := b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour})
		maintained <- err
	}()
	waiting(2) // the drop, behind the requeue
	if err := blocker.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-requeued; err != nil {
		t.Fatalf("requeue: %v", err)
	}
	if err := <-maintained; err != nil {
		t.Fatalf("maintenance: %v", err)
	}

	ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: x})
	if err != nil || ev.State != ferry.StatePending {
		t.Fatalf("requeued event = %+v, %v; want pending", ev, err)
	}
	conflicts, err := b.store.ConflictList(b.ctx, &ferry.ConflictListParams{ID: x})
	if err != nil || len(conflicts) != 1 || string(conflicts[0].Payload) != "other bytes" {
		t.Errorf("conflicts of the requeued event = %d, %v; want its one kept delivery", len(conflicts), err)
	}
	actions, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: x})
	if err != nil || len(actions) != 1 {
		t.Errorf("actions of the requeued event = %d, %v; want the requeue", len(actions), err)
	}
}

// The key purge renews the maintenance lease between its batches, as the
// partition steps do, and stops at the first renewal that fails: a run
// over millions of due keys can outlive the lease.
func TestArchiveKeyPurgeRenewsTheLease(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	for _, id := range []string{"a", "b", "c"} {
		b.done(t, id)
	}
	// Drop the events' day, keep their keys.
	b.clock.Advance(72 * time.Hour)
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour, KeyRetention: 100 * time.Hour})
	const keys = `SELECT count(*) FROM ferry_event_key`
	if n := b.count(t, keys); n != 3 {
		t.Fatalf("%d keys before the run, want 3", n)
	}
	// The lease passes as soon as a key is gone.
	lost := errors.New("lease lost")
	renew := func() error {
		if b.count(t, keys) < 3 {
			return lost
		}
		return nil
	}
	var res ferry.ArchiveMaintainResult
	err := postgres.ArchiveRun(b.store, b.ctx, &ferry.ArchiveMaintainParams{Retention: 24 * time.Hour, KeyRetention: time.Hour, KeyBatch: 1}, &res, renew)
	if !errors.Is(err, lost) || res.Keys != 1 || b.count(t, keys) != 2 {
		t.Fatalf("run = %d keys purged (%d left), %v; want one batch, then the renewal's error", res.Keys, b.count(t, keys), err)
	}
}

// A redelivery with another body of a key whose event is gone (dropped
// under a KeyRetention longer than Retention) keeps its conflict; the key's
// purge forgets it too, instead of leaving its body stored for ever.
func TestArchiveKeyPurgeForgetsTheConflictsOfGoneEvents(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	p, x := b.doneKeyKept(t)
	b.clock.Advance(72 * time.Hour)
	b.maintain(t, p) // drops x's day, keeps its key
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte("another body")})
	if err != nil || res.Outcome != ferry.ReceiveConflict {
		t.Fatalf("redelivery with another body = %+v, %v; want a conflict", res, err)
	}
	const conflicts = `SELECT count(*) FROM ferry_conflict WHERE event_id = $1`
	if n := b.count(t, conflicts, x); n != 1 {
		t.Fatalf("%d conflicts kept, want 1", n)
	}
	b.clock.Advance(60 * 24 * time.Hour) // past the key's retention
	got, err := b.store.ArchiveMaintain(b.ctx, p)
	if err != nil || got.Keys != 1 {
		t.Fatalf("maintenance purged %+v, %v; want x's key", got, err)
	}
	if n := b.count(t, conflicts, x); n != 0 {
		t.Errorf("x's key is purged, but %d of its conflicts are still stored", n)
	}
}

// A key purge beside maintenance moving a day out of the default
// partition (ferry_archive_create, held open here after its attach) waits
// for the move, then finds the event in the day's new partition: the key of
// an event still stored is kept, with its conflicts. Planned before the
// attach, it looked in the partitions of before, found the event nowhere
// and purged its key: a redelivery was a new event, run again.
func TestArchiveKeyPurgeBesideAMoveKeepsAStoredEventsKey(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	for _, body := range []string{"x", "other bytes"} { // x, and a conflict kept on it
		if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// Done ten days after its first delivery, in the default partition:
	// no day's partition exists yet.
	b.clock.Advance(10 * 24 * time.Hour)
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %d claims, %v", len(claims), err)
	}
	x := claims[0].Event.ID
	if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()}); err != nil {
		t.Fatal(err)
	}
	mover, err := b.store.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mover.Rollback(context.Background()) })
	now := b.clock.Now()
	day := now.Truncate(24 * time.Hour)
	var created bool
	var moverPid int
	if err := mover.QueryRow(b.ctx, `SELECT ferry_archive_create($1::date, $2::date, $3::timestamptz), pg_backend_pid()`,
		day, day.Add(24*time.Hour), now).Scan(&created, &moverPid); err != nil || !created {
		t.Fatalf("the move of x's day: created %v, %v", created, err)
	}
	purged := make(chan error, 1)
	var n int
	go func() {
		var err error
		n, err = postgres.PurgeKeys(b.store, b.ctx, "s", 7*24*time.Hour, 100)
		purged <- err
	}()
	b.waiter(t, moverPid, "ferry_event_")
	if err := mover.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-purged; err != nil || n != 0 {
		t.Fatalf("the key purge beside the move purged %d keys, %v; want none: x is stored", n, err)
	}
	if keys, conflicts := b.count(t, `SELECT count(*) FROM ferry_event_key WHERE id = $1`, x),
		b.count(t, `SELECT count(*) FROM ferry_conflict WHERE event_id = $1`, x); keys != 1 || conflicts != 1 {
		t.Fatalf("x keeps %d keys and %d conflicts, want 1 and 1", keys, conflicts)
	}
	res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte("x")})
	if err != nil || res.ID != x || res.Outcome != ferry.ReceiveDuplicate {
		t.Fatalf("redelivery of x = %+v, %v; want a duplicate of event %d", res, err, x)
	}
}

// A redelivery of an event EventPurge is deleting: the receipt locks the
// key, then the event; the purge deletes the event, and only then, in a
// statement of its own, the key. The two never wait on each other in a
// cycle (PostgreSQL would kill one with a deadlock error).
func TestEventPurgeAndARedeliveryNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	x := b.done(t, "x")
	if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte("other")}); err != nil {
		t.Fatal(err) // x has a conflict row now
	}
	b.clock.Advance(25 * time.Hour)
	// Stall the purge after it deleted x, on x's conflict row.
	blocker, blockerPid := b.lockConflicts(t, x)
	purged := make(chan error, 1)
	go func() {
		_, err := b.store.EventPurge(b.ctx, &ferry.EventPurgeParams{Source: "s", Retention: 24 * time.Hour, ReplayWindow: 24 * time.Hour})
		purged <- err
	}()
	purger := b.waiter(t, blockerPid, "ferry_done_forget")
	received := make(chan error, 1)
	go func() {
		_, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte("x")})
		received <- err
	}()
	b.waiter(t, purger, "ferry_event_done_redeliver") // behind the purge's delete of x
	if err := blocker.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if perr, rerr := <-purged, <-received; perr != nil || rerr != nil {
		t.Fatalf("purge: %v; redelivery: %v", perr, rerr)
	}
}

// A drop holds the archive's parents for its detach only: while its second
// transaction deletes the day's side rows (held here on a conflict row a
// test transaction locks), it holds no lock on ferry_event_done or
// ferry_attempt_done, and a completion of another event finishes without
// waiting for it. In one transaction, 2M actions made every completion wait
// 2.2 s.
func TestArchiveDropDeletesSideRowsWithoutHoldingCompletions(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	x := b.droppableDay(t)
	y := b.claimed(t, "y")
	blocker, blockerPid := b.lockConflicts(t, x)
	maintained := make(chan error, 1)
	var res *ferry.ArchiveMaintainResult
	go func() {
		var err error
		res, err = b.store.ArchiveMaintain(b.ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 24 * time.Hour})
		maintained <- err
	}()
	dropPid := b.waiter(t, blockerPid, "ferry_archive_drop_detached")
	if n := b.count(t, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND relation IN ('ferry_event_done'::regclass, 'ferry_attempt_done'::regclass)`, dropPid); n != 0 {
		t.Errorf("while it deletes side rows, the drop holds %d locks on the archive's parents, want none", n)
	}

	// The completion ends, or the database shows it waiting for the drop.
	completed := make(chan error, 1)
	go func() { completed <- b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: y}) }()
	var completeErr error
	finished := false
	for deadline := time.Now().Add(time.Minute); !finished; time.Sleep(5 * time.Millisecond) {
		select {
		case completeErr = <-completed:
			finished = true
			continue
		default:
		}
		if b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, dropPid) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after a minute, the completion neither finished nor waited for the drop")
		}
	}
	if finished {
		// Still waiting, so the two overlapped.
		if n := b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND $2 = ANY(pg_blocking_pids(pid))`, dropPid, blockerPid); n != 1 {
			t.Error("the drop stopped waiting on the conflict row before the completion ended: the test proved nothing")
		}
	} else {
		t.Error("a completion waits for the drop's side-row delete")
	}
	if err := blocker.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if !finished {
		completeErr = <-completed
	}
	if completeErr != nil {
		t.Fatalf("completion beside the drop: %v", completeErr)
	}
	if err := <-maintained; err != nil {
		t.Fatalf("maintenance: %v", err)
	}
	if res.Dropped == 0 {
		t.Errorf("maintenance = %+v, want x's day dropped", res)
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_conflict WHERE event_id = $1`, x); n != 0 {
		t.Errorf("%d conflicts of the dropped event x", n)
	}
	if ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: y.ID}); err != nil || ev.State != ferry.StateDone {
		t.Errorf("y after the drop: %+v, %v; want done", ev, err)
	}
}

// A run that stops after a drop's first transaction (a crash, a lock
// timeout, a lost lease) leaves the day detached: its events are gone from
// every read and from the done counts, and ArchiveInfo no longer counts it.
// The next run finishes it, even with a retention raised meanwhile to cover
// the day: its side rows and tables go, while the side rows of an event
// still stored, whose id falls inside the day's id range, stay.
func TestArchiveMaintainFinishesADropStoppedAfterTheDetach(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: time.Hour})
	ids := map[string]int64{}
	for _, key := range []string{"x", "y", "z"} {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: key, Payload: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		ids[key] = res.ID
		if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: key, Payload: []byte("other bytes")}); err != nil {
			t.Fatal(err) // a conflict row for each
		}
	}
	claims, err := b.store.EventClaimMany(b.ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 3, TTL: 100 * time.Hour})
	if err != nil || len(claims) != 3 {
		t.Fatalf("claims: %d, %v", len(claims), err)
	}
	leases := map[int64]ferry.Lease{}
	for _, c := range claims {
		leases[c.Event.ID] = c.Event.Lease()
	}
	complete := func(key string) {
		t.Helper()
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: leases[ids[key]]}); err != nil {
			t.Fatal(err)
		}
	}
	complete("x") // x and z on Jan 2, y, received between them, on Jan 5
	complete("z")
	b.clock.Advance(72 * time.Hour)
	complete("y")

	const day = "ferry_event_done_20260102"
	if _, err := b.store.Pool().Exec(b.ctx, `SELECT ferry_archive_detach($1)`, day); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM ferry_event_done_partition WHERE name = $1 AND detached`, day); n != 1 {
		t.Fatalf("the day is not registered detached after the first step")
	}
	if _, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: ids["x"]}); !errors.Is(err, ferry.ErrNotFound) {
		t.Errorf("x after the detach: %v, want ErrNotFound", err)
	}
	if n := b.doneCount(t); n != 1 {
		t.Errorf("done count %d after the detach, want 1 (y)", n)
	}
	info, err := b.store.ArchiveInfo(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC); !info.Oldest.Equal(want) {
		t.Errorf("oldest partition %s after the detach, want %s: a detached day holds no events", info.Oldest, want)
	}

	// The operator raised the retention meanwhile: the day is inside it.
	b.maintain(t, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 30 * 24 * time.Hour})
	if n := b.count(t, `SELECT count(*) FROM ferry_event_done_partition WHERE name = $1`, day); n != 0 {
		t.Errorf("the detached day is still registered after the next run")
	}
	if n := b.count(t, `SELECT count(to_regclass($1)) + count(to_regclass('ferry_attempt_done_20260102'))`, day); n != 0 {
		t.Errorf("%d of the detached day's tables are still there", n)
	}
	for key, want := range map[string]int{"x": 0, "z": 0, "y": 1} {
		if n := b.count(t, `SELECT count(*) FROM ferry_conflict WHERE event_id = $1`, ids[key]); n != want {
			t.Errorf("%s has %d conflicts, want %d", key, n, want)
		}
	}
	if ev, err := b.store.EventGet(b.ctx, &ferry.EventGetParams{ID: ids["y"]}); err != nil || ev.State != ferry.StateDone {
		t.Errorf("y: %+v, %v; want done", ev, err)
	}
	if n := b.doneCount(t); n != 1 {
		t.Errorf("done count %d after the run, want 1 (y)", n)
	}
}

// dayOf names the partition that holds done event id.
func (b *archiveBundle) dayOf(t *testing.T, id int64) string {
	t.Helper()
	var day string
	if err := b.store.Pool().QueryRow(b.ctx, `SELECT tableoid::regclass::text FROM ferry_event_done WHERE id = $1`, id).Scan(&day); err != nil {
		t.Fatal(err)
	}
	return day
}

// detachDayOf runs a drop's first step alone on the day that holds event
// id, as a run that stops after it leaves the day, and returns the day's
// name.
func (b *archiveBundle) detachDayOf(t *testing.T, id int64) string {
	t.Helper()
	day := b.dayOf(t, id)
	if _, err := b.store.Pool().Exec(b.ctx, `SELECT ferry_archive_detach($1)`, day); err != nil {
		t.Fatal(err)
	}
	return day
}

// acrossADetach completes x, has write keep a side row of x ("before"),
// runs a drop's first step alone on x's day three days on, has write keep
// another ("after"), then lets maintenance finish the drop; it returns what
// list (one text column, for event $1) reads of x's rows then.
func (b *archiveBundle) acrossADetach(t *testing.T, write func(x int64, when string), list string) []string {
	t.Helper()
	p, x := b.doneKeyKept(t)
	write(x, "before")
	b.clock.Advance(72 * time.Hour)
	b.detachDayOf(t, x)
	write(x, "after")
	b.maintain(t, p)
	rows, _ := b.store.Pool().Query(b.ctx, list, x)
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return kept
}

// A redelivery with another body of an event whose day a stopped run
// detached is answered 2xx and keeps its conflict; the next run finishes
// the drop and deletes the conflict kept before the detach, but keeps that
// one for the key purge.
func TestArchiveDropKeepsConflictsKeptAfterTheDetach(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	kept := b.acrossADetach(t, func(_ int64, body string) {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte(body)})
		if err != nil || res.Outcome != ferry.ReceiveConflict {
			t.Fatalf("redelivery of x with %q = %+v, %v; want a conflict", body, res, err)
		}
	}, `SELECT convert_from(payload, 'UTF8') FROM ferry_conflict WHERE event_id = $1 ORDER BY id`)
	if len(kept) != 1 || kept[0] != "after" {
		t.Errorf("x's conflicts after the drop = %q; want the one acknowledged after the detach", kept)
	}
}

// A replay (x's body under a new key) acknowledged after a stopped run
// detached x's day keeps its row too; one kept before the detach goes with
// the day.
func TestArchiveDropKeepsReplaysKeptAfterTheDetach(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	kept := b.acrossADetach(t, func(x int64, when string) {
		res, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x-" + when, Payload: []byte("x"), ReplayWindow: 96 * time.Hour})
		if err != nil || res.Outcome != ferry.ReceiveReplay || res.ID != x {
			t.Fatalf("x-%s with x's body = %+v, %v; want a replay of x", when, res, err)
		}
	}, `SELECT claimed_event_id FROM ferry_replay WHERE event_id = $1 ORDER BY id`)
	if len(kept) != 1 || kept[0] != "x-after" {
		t.Errorf("x's replays after the drop = %q; want the one acknowledged after the detach", kept)
	}
}

// A replay receipt takes its row's id before it commits and locks nothing
// of the archive: one still open when the detach reads the marks, below a
// row committed meanwhile, must be committed before the detach is, or be
// kept. The detach waits for it; then its row went before the detach, and
// goes with the day.
func TestArchiveDetachWaitsForSideRowsInFlight(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	p, x := b.doneKeyKept(t)
	b.clock.Advance(72 * time.Hour)
	y := b.done(t, "y")
	inFlight, err := b.store.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.Rollback(b.ctx)
	const insert = `INSERT INTO ferry_replay (event_id, received_at, claimed_event_id) VALUES ($1, now(), $2)`
	if _, err := inFlight.Exec(b.ctx, insert, x, "x-in-flight"); err != nil {
		t.Fatal(err)
	}
	var holder int
	if err := inFlight.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Pool().Exec(b.ctx, insert, y, "y-later"); err != nil { // a higher id, committed
		t.Fatal(err)
	}
	day := b.dayOf(t, x)
	detached := make(chan error, 1)
	go func() {
		_, err := b.store.Pool().Exec(b.ctx, `SELECT ferry_archive_detach($1)`, day)
		detached <- err
	}()
	// The detach ends, or waits for the receipt in flight.
	waited := false
	for deadline := time.Now().Add(time.Minute); !waited; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-detached:
			detached <- err
		default:
			waited = b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%ferry_archive_detach%'`, holder) > 0
			if time.Now().After(deadline) {
				t.Fatal("after a minute, the detach neither ended nor waited for the receipt in flight")
			}
			continue
		}
		break
	}
	if err := inFlight.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-detached; err != nil {
		t.Fatal(err)
	}
	b.maintain(t, p)
	n := b.count(t, `SELECT count(*) FROM ferry_replay WHERE event_id = $1`, x)
	switch {
	case waited && n != 0:
		t.Errorf("the detach waited for the receipt, but %d of x's replays are left", n)
	case !waited && n != 1:
		t.Errorf("a replay committed after the detach was deleted with the day (%d left)", n)
	}
	if !waited {
		t.Error("the detach did not wait for a side row in flight below its mark")
	}
}

// A day 007 detached (a run stopped between the steps before 008) has no
// marks: which side rows came after the detach is unknown, so the drop
// keeps them all, and the key purge forgets them with the key.
func TestArchiveDropWithoutMarksLeavesSideRowsToTheKeyPurge(t *testing.T) {
	t.Parallel()
	b := archiveSetup(t)
	p, x := b.doneKeyKept(t)
	if _, err := b.store.EventReceive(b.ctx, &ferry.EventReceiveParams{Source: "s", EventID: "x", Payload: []byte("other")}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(72 * time.Hour)
	day := b.detachDayOf(t, x)
	if _, err := b.store.Pool().Exec(b.ctx, `UPDATE ferry_event_done_partition SET conflict_mark = NULL, replay_mark = NULL, action_mark = NULL WHERE name = $1`, day); err != nil {
		t.Fatal(err)
	}
	b.maintain(t, p)
	if n := b.count(t, `SELECT count(to_regclass($1))`, day); n != 0 {
		t.Errorf("the day detached without marks is still there")
	}
	const conflicts = `SELECT count(*) FROM ferry_conflict WHERE event_id = $1`
	if n := b.count(t, conflicts, x); n != 1 {
		t.Errorf("%d conflicts of x after a drop without marks, want its one, left to the key purge", n)
	}
	b.clock.Advance(30 * 24 * time.Hour)
	b.maintain(t, p)
	if n := b.count(t, conflicts, x); n != 0 {
		t.Errorf("%d conflicts of x after its key's purge, want none", n)
	}
}
