package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testRequeue checks EventRequeue: which states go back to pending, and
// the fresh budget. readOnly is Harness.ReadOnly: a dry run must count on
// a store that refuses every write.
func testRequeue[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], readOnly func(*testing.T, ferry.TxStore[TX]) ferry.TxStore[TX]) {
	run(t, setup, "DeadGetsAFreshBudget", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		lease := claimOne(t, b, "w1").Event.Lease()
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, id, ferry.StateDead)
		b.clock.Advance(time.Hour)
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{id}, Actor: "op"})
		if err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		ev := wantState(t, b, id, ferry.StatePending)
		if !ev.RequeuedAt.Equal(b.clock.Now()) || !ev.NextAttemptAt.Equal(b.clock.Now()) || ev.Attempt != 1 || ev.AttemptBase != 1 {
			t.Errorf("requeued: at %v next %v attempt %d base %d", ev.RequeuedAt, ev.NextAttemptAt, ev.Attempt, ev.AttemptBase)
		}
		c := claimOne(t, b, "w1")
		if c.Event.Attempt != 2 || c.Event.AttemptBase != 1 {
			t.Fatalf("claim after requeue: attempt %d base %d, want 2 and 1 (the fencing token never goes down; the budget starts again)", c.Event.Attempt, c.Event.AttemptBase)
		}
		list, err := b.store.EventList(b.ctx, &ferry.EventListParams{EventIDContains: "evt_1"})
		if err != nil || len(list.Events) != 1 || list.Events[0].AttemptBase != 1 {
			t.Fatalf("listed after requeue: %+v, %v; want attempt base 1", list, err)
		}
		state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), MaxAttempts: 2})
		if err != nil || state != ferry.StatePending {
			t.Fatalf("first failure after requeue = %s, %v; want pending (fresh budget)", state, err)
		}
	})

	run(t, setup, "DoneAndUnknownByIDButNeverLive", func(t *testing.T, b *bundle[TX]) {
		done := receive(t, b, "stripe", "done")
		lease := claimOne(t, b, "w1").Event.Lease()
		mustComplete(t, b, lease)
		live := receive(t, b, "stripe", "live")
		claimOne(t, b, "w1")
		pending := receive(t, b, "stripe", "pending")
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{done, live, pending}, States: ferry.States, Actor: "op"})
		if err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v; want 1", n, err)
		}
		ev := wantState(t, b, done, ferry.StatePending)
		if !ev.CompletedAt.IsZero() {
			t.Errorf("requeued event keeps completed_at %v", ev.CompletedAt)
		}
		wantState(t, b, live, ferry.StateInProgress)
	})

	run(t, setup, "BulkBySourceTakesDeadAndUnknown", func(t *testing.T, b *bundle[TX]) {
		var dead []int64
		for i := range 3 {
			dead = append(dead, receive(t, b, "stripe", fmt.Sprint("d", i)))
		}
		other := receive(t, b, "github", "d")
		for range 4 {
			lease := claimOne(t, b, "w1").Event.Lease()
			if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Dead: true}); err != nil {
				t.Fatal(err)
			}
		}
		// And one unknown.
		unknown := makeUnknown(t, b, "u")
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Source: "stripe", Actor: "op"})
		if err != nil || n != 4 {
			t.Fatalf("bulk requeue = %d, %v; want 4 (three dead, one unknown)", n, err)
		}
		for _, id := range append(dead, unknown) {
			wantState(t, b, id, ferry.StatePending)
		}
		wantState(t, b, other, ferry.StateDead)
	})

	// Runnable narrows a requeue, bulk or by IDs, and its dry run, to the
	// sources a worker runs: another source's event would stay pending.
	run(t, setup, "OnlyRunnableSources", func(t *testing.T, b *bundle[TX]) {
		stripe := receive(t, b, "stripe", "d")
		retired := receive(t, b, "retired", "d")
		for range 2 {
			lease := claimOne(t, b, "w1").Event.Lease()
			if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Dead: true}); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []*ferry.EventRequeueParams{
			{IDs: []int64{retired}, Runnable: []string{"stripe", "github"}, Actor: "op"},
			{Runnable: []string{"stripe", "github"}, DryRun: true, Actor: "op"},
		} {
			if n, err := b.store.EventRequeue(b.ctx, p); err != nil || n != 1-len(p.IDs) {
				t.Fatalf("requeue %+v = %d, %v; want %d: only the runnable source's", p, n, err, 1-len(p.IDs))
			}
		}
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Runnable: []string{"stripe"}, Actor: "op"}); err != nil || n != 1 {
			t.Fatalf("bulk requeue of stripe's = %d, %v; want 1", n, err)
		}
		wantState(t, b, stripe, ferry.StatePending)
		wantState(t, b, retired, ferry.StateDead)
		// Without Runnable, any source.
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{retired}, Actor: "op"}); err != nil || n != 1 {
			t.Fatalf("requeue by id without Runnable = %d, %v; want 1", n, err)
		}
	})

	run(t, setup, "RequeueRestartsBudgetAndAge", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		fail := func() ferry.State {
			lease := claimOne(t, b, "w1").Event.Lease()
			state, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: 2, MaxAge: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return state
		}
		if s1, s2 := fail(), fail(); s1 != ferry.StatePending || s2 != ferry.StateDead {
			t.Fatalf("states = %s, %s; want pending then dead", s1, s2)
		}
		b.clock.Advance(2 * time.Hour) // older than MaxAge since the first delivery
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{id}, Actor: "op"}); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		if s := fail(); s != ferry.StatePending {
			t.Errorf("first attempt after requeue went %s, want pending: budget and age restart", s)
		}
		if ev := get(t, b, id); ev.Attempt != 3 {
			t.Errorf("attempt = %d, want 3: the counter never goes down", ev.Attempt)
		}
	})

	run(t, setup, "BulkRequeueLeavesDone", func(t *testing.T, b *bundle[TX]) {
		done := receive(t, b, "stripe", "done")
		dead := receive(t, b, "stripe", "dead")
		receive(t, b, "stripe", "pending")
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: claimOne(t, b, "w1").Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: claimOne(t, b, "w1").Event.Lease(), MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Second)
		n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Source: "stripe", Actor: "op"})
		if err != nil || n != 1 {
			t.Fatalf("bulk requeue = %d, %v; want 1 (the dead event)", n, err)
		}
		wantState(t, b, done, ferry.StateDone)
		ev := wantState(t, b, dead, ferry.StatePending)
		if ev.Attempt != 1 || !ev.RequeuedAt.Equal(b.clock.Now()) {
			t.Errorf("bulk requeued: attempt %d at %v", ev.Attempt, ev.RequeuedAt)
		}
	})

	// By IDs the states default to done, dead and unknown; naming only live
	// states requeues nothing; an unknown state is refused, and nothing of
	// the call happens.
	run(t, setup, "DefaultAndBadStates", func(t *testing.T, b *bundle[TX]) {
		done := receive(t, b, "stripe", "done")
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: claimOne(t, b, "w1").Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		live := []ferry.State{ferry.StatePending, ferry.StateInProgress}
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{done}, States: live, Actor: "op"}); err != nil || n != 0 {
			t.Fatalf("requeue naming live states = %d, %v; want 0", n, err)
		}
		bad := []ferry.State{ferry.StateDone, "stuck"}
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{done}, States: bad, Actor: "op"}); !errors.Is(err, ferry.ErrInvalidParams) || n != 0 {
			t.Fatalf("requeue naming an unknown state = %d, %v; want ErrInvalidParams", n, err)
		}
		wantState(t, b, done, ferry.StateDone)
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{done}, Actor: "op"}); err != nil || n != 1 {
			t.Fatalf("requeue by id with default states = %d, %v; want 1", n, err)
		}
		wantState(t, b, done, ferry.StatePending)
	})

	// A bulk requeue selects by EventList's filters; a dry run counts
	// exactly what the requeue then takes, and changes nothing.
	run(t, setup, "BulkByFilterAndDryRun", func(t *testing.T, b *bundle[TX]) {
		start := b.clock.Now()
		kill := func(eventID, typ string) int64 {
			t.Helper()
			res := receiveWith(t, b, &ferry.EventReceiveParams{Source: "stripe", EventID: eventID, Type: typ})
			lease := claimOne(t, b, "w1").Event.Lease()
			if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Dead: true}); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Second)
			return res.ID
		}
		early := kill("a_early", "charge.failed") // at start
		match := kill("a_match", "charge.failed") // start+1s
		other := kill("a_other", "invoice.paid")  // start+2s
		late := kill("b_late", "charge.failed")   // start+3s
		filter := ferry.EventRequeueParams{
			Source: "stripe", Type: "charge.failed", EventIDContains: "a_",
			Since: start.Add(time.Second), Until: start.Add(3 * time.Second), Actor: "op",
		}
		dry := filter
		dry.DryRun = true
		if n, err := b.store.EventRequeue(b.ctx, &dry); err != nil || n != 1 {
			t.Fatalf("dry run = %d, %v; want 1", n, err)
		}
		for _, id := range []int64{early, match, other, late} {
			wantState(t, b, id, ferry.StateDead) // the dry run changed nothing
			if list, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: id}); err != nil || len(list) != 0 {
				t.Fatalf("the dry run recorded actions %+v, %v", list, err)
			}
		}
		if n, err := b.store.EventRequeue(b.ctx, &filter); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v; want 1", n, err)
		}
		wantState(t, b, match, ferry.StatePending)
		for _, id := range []int64{early, other, late} {
			wantState(t, b, id, ferry.StateDead)
		}
		// Live events stay out of a bulk requeue even when named by state.
		filter.States = ferry.States
		if n, err := b.store.EventRequeue(b.ctx, &filter); err != nil || n != 0 {
			t.Fatalf("requeue of a pending match = %d, %v; want 0", n, err)
		}
		if err := b.store.EventComplete(b.ctx, &ferry.EventCompleteParams{Lease: claimOne(t, b, "w1").Event.Lease()}); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, match, ferry.StateDone)

		// Before bounds a bulk requeue to the events that existed when it
		// was counted.
		newer := kill("a_newer", "charge.failed")
		bounded := ferry.EventRequeueParams{Source: "stripe", Before: newer, Actor: "op"}
		if n, err := b.store.EventRequeue(b.ctx, &bounded); err != nil || n != 3 {
			t.Fatalf("requeue before %d = %d, %v; want the 3 older dead", newer, n, err)
		}
		wantState(t, b, newer, ferry.StateDead)
	})

	// A dry run is what a confirmation page (a GET) shows, so it only
	// reads: it counts the same on a store that refuses every write (a
	// standby), it leaves every event, ledger and action as it was, and
	// the requeue then takes what it counted. Each case runs on a store of
	// its own with done, dead, unknown, pending and in_progress events.
	t.Run("DryRunOnlyReads", func(t *testing.T) {
		t.Parallel()
		testDryRunOnlyReads(t, setup, readOnly)
	})

	// A bulk requeue takes, by each filter, the events EventList shows in
	// the states the requeue takes: one rule, however each store writes
	// it. Event ids hold LIKE's wildcards and differ in case only.
	run(t, setup, "BulkTakesWhatTheListShows", func(t *testing.T, b *bundle[TX]) {
		testRequeueMatchesList(t, b)
	})

	// EventRetryNow makes a pending event in backoff due at once, and
	// nothing else: not a live or terminal one, nor one already due.
	run(t, setup, "RetryNow", func(t *testing.T, b *bundle[TX]) {
		id := receive(t, b, "stripe", "evt_1")
		retry := func() bool {
			t.Helper()
			ok, err := b.store.EventRetryNow(b.ctx, &ferry.EventRetryNowParams{ID: id, Actor: "ops"})
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if retry() {
			t.Fatal("retry now of an event already due reported a change")
		}
		lease := claimOne(t, b, "w1").Event.Lease()
		if retry() {
			t.Fatal("retry now of an in_progress event reported a change")
		}
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, RetryDelay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if claims := claim(t, b, "w2", 1); len(claims) != 0 {
			t.Fatal("an event in backoff was claimed")
		}
		b.clock.Advance(time.Minute)
		if !retry() {
			t.Fatal("retry now of a pending event in backoff reported no change")
		}
		ev := wantState(t, b, id, ferry.StatePending)
		list, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: id})
		if err != nil || len(list) != 1 || list[0].Action != ferry.ActionRetryNow || list[0].Actor != "ops" || !list[0].At.Equal(b.clock.Now()) {
			t.Errorf("actions after retry now = %+v, %v; want one retry_now by ops at %v", list, err, b.clock.Now())
		}
		if !ev.NextAttemptAt.Equal(b.clock.Now()) || ev.Attempt != 1 {
			t.Errorf("after retry now: next attempt %v (now %v), attempt %d", ev.NextAttemptAt, b.clock.Now(), ev.Attempt)
		}
		if c := claimOne(t, b, "w2"); c.Event.ID != id || c.Event.Attempt != 2 {
			t.Errorf("claimed %d attempt %d, want %d attempt 2", c.Event.ID, c.Event.Attempt, id)
		}
		if retry() {
			t.Error("retry now of a claimed event reported a change")
		}
	})

	run(t, setup, "RecordsWhoAndWhen", func(t *testing.T, b *bundle[TX]) {
		done := receive(t, b, "stripe", "done")
		lease := claimOne(t, b, "w1").Event.Lease()
		mustComplete(t, b, lease)
		dead := receive(t, b, "stripe", "dead")
		lease = claimOne(t, b, "w1").Event.Lease()
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Dead: true}); err != nil {
			t.Fatal(err)
		}
		pending := receive(t, b, "stripe", "pending")

		b.clock.Advance(time.Hour)
		replayedAt := b.clock.Now()
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{done, pending}, Actor: "alice"}); err != nil || n != 1 {
			t.Fatalf("requeue by id = %d, %v", n, err)
		}
		b.clock.Advance(time.Minute)
		if n, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{Source: "stripe", States: []ferry.State{ferry.StateDead}, Actor: "token:ops"}); err != nil || n != 1 {
			t.Fatalf("bulk requeue = %d, %v", n, err)
		}
		actions := func(id int64) []*ferry.Action {
			list, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			return list
		}
		if got := actions(done); len(got) != 1 || got[0].EventID != done || got[0].Action != ferry.ActionReplay ||
			got[0].Actor != "alice" || !got[0].At.Equal(replayedAt) {
			t.Errorf("actions of the replayed event = %+v, want one replay by alice at %v", got, replayedAt)
		}
		if got := actions(dead); len(got) != 1 || got[0].Action != ferry.ActionRequeue ||
			got[0].Actor != "token:ops" || !got[0].At.Equal(b.clock.Now()) {
			t.Errorf("actions of the requeued event = %+v, want one requeue by token:ops at %v", got, b.clock.Now())
		}
		// Nothing was done to the pending event: nothing is recorded.
		if got := actions(pending); len(got) != 0 {
			t.Errorf("actions of the untouched event = %+v, want none", got)
		}
		// A second replay adds a row; the first stays.
		if err := requeueAndComplete(b, done); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.EventRequeue(b.ctx, &ferry.EventRequeueParams{IDs: []int64{done}, Actor: "bob"}); err != nil {
			t.Fatal(err)
		}
		if got := actions(done); len(got) != 2 || got[1].Actor != "bob" || got[0].Actor != "alice" {
			t.Errorf("actions after a second replay = %+v, want alice then bob", got)
		}
	})
}

// testDryRunOnlyReads runs the DryRunOnlyReads cases, each on a store of
// its own with the events makeDryRunEvents makes.
func testDryRunOnlyReads[TX any](t *testing.T, setup func(*testing.T) *bundle[TX], readOnly func(*testing.T, ferry.TxStore[TX]) ferry.TxStore[TX]) {
	for _, c := range []struct {
		name   string
		params func(ids dryRunEvents) ferry.EventRequeueParams
		want   int
	}{
		{"ByIDs", func(ids dryRunEvents) ferry.EventRequeueParams { // done, dead and unknown by default
			return ferry.EventRequeueParams{IDs: ids.all()}
		}, 4},
		{"BulkAllStatesOfSource", func(dryRunEvents) ferry.EventRequeueParams {
			return ferry.EventRequeueParams{Source: "stripe", States: ferry.States}
		}, 3},
		{"BulkDefault", func(dryRunEvents) ferry.EventRequeueParams { // dead and unknown
			return ferry.EventRequeueParams{}
		}, 3},
		{"BulkDone", func(dryRunEvents) ferry.EventRequeueParams {
			return ferry.EventRequeueParams{States: []ferry.State{ferry.StateDone}}
		}, 1},
		{"BulkBefore", func(ids dryRunEvents) ferry.EventRequeueParams { // done and dead are older
			return ferry.EventRequeueParams{States: ferry.States, Before: ids.unknown}
		}, 2},
	} {
		run(t, setup, c.name, func(t *testing.T, b *bundle[TX]) {
			ids := makeDryRunEvents(t, b)
			params := c.params(ids)
			params.Actor = "op"
			params.DryRun = true
			before := make(map[string]snapshot)
			for _, id := range ids.all() {
				before[fmt.Sprintf("#%d", id)] = snap(t, b, id)
			}
			if n, err := b.store.EventRequeue(b.ctx, &params); err != nil || n != c.want {
				t.Fatalf("dry run = %d, %v; want %d", n, err, c.want)
			}
			if readOnly == nil {
				t.Fatal("Harness.ReadOnly is required")
			}
			if n, err := readOnly(t, b.store).EventRequeue(b.ctx, &params); err != nil || n != c.want {
				t.Fatalf("dry run on a store that cannot write = %d, %v; want %d: a dry run must only read", n, err, c.want)
			}
			wantAllUnchanged(t, b, before)
			for _, id := range ids.all() {
				if list, err := b.store.ActionList(b.ctx, &ferry.ActionListParams{ID: id}); err != nil || len(list) != 0 {
					t.Fatalf("the dry run recorded actions of event %d: %+v, %v", id, list, err)
				}
			}
			params.DryRun = false
			if n, err := b.store.EventRequeue(b.ctx, &params); err != nil || n != c.want {
				t.Fatalf("requeue after its dry run = %d, %v; want the %d it counted", n, err, c.want)
			}
			wantState(t, b, ids.pending, ferry.StatePending)
			wantState(t, b, ids.running, ferry.StateInProgress)
		})
	}
}

// dryRunEvents are the events of the DryRunOnlyReads cases, oldest first:
// stripe's done, dead and unknown, github's dead, and stripe's running
// (in_progress) and pending.
type dryRunEvents struct {
	done, dead, unknown, githubDead, running, pending int64
}

func (e dryRunEvents) all() []int64 {
	return []int64{e.done, e.dead, e.unknown, e.githubDead, e.running, e.pending}
}

func makeDryRunEvents[TX any](t *testing.T, b *bundle[TX]) dryRunEvents {
	t.Helper()
	var e dryRunEvents
	e.done = receive(t, b, "stripe", "done")
	mustComplete(t, b, claimOne(t, b, "w1").Event.Lease())
	kill := func(source, eventID string) int64 {
		t.Helper()
		id := receive(t, b, source, eventID)
		if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: claimOne(t, b, "w1").Event.Lease(), Dead: true}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	e.dead = kill("stripe", "dead")
	e.unknown = makeUnknown(t, b, "unknown")
	e.githubDead = kill("github", "dead")
	e.running = receive(t, b, "stripe", "running")
	claimOne(t, b, "w1")
	e.pending = receive(t, b, "stripe", "pending")
	return e
}

func testRequeueMatchesList[TX any](t *testing.T, b *bundle[TX]) {
	unknown := makeUnknown(t, b, "a_unknown") // before any pending event: its claim would take them
	start := b.clock.Now()
	var ids []int64
	for i, e := range []struct{ source, typ, eventID string }{
		{"stripe", "charge.failed", "a_1"}, {"stripe", "invoice.paid", "ab1"}, {"github", "charge.failed", "a%1"},
		{"stripe", "charge.failed", "A_1"}, {"github", "push", "xa_1"}, {"stripe", "charge.failed", "b_1"},
		{"stripe", "invoice.paid", "a_2"}, {"github", "charge.failed", "ab2"},
	} {
		b.clock.Advance(time.Second)
		res := receiveWith(t, b, &ferry.EventReceiveParams{Source: e.source, EventID: e.eventID, Type: e.typ, Payload: []byte(`{}`)})
		ids = append(ids, res.ID)
		lease := claimOne(t, b, "w1").Event.Lease()
		if i%3 == 0 {
			mustComplete(t, b, lease)
		} else if _, err := b.store.EventFail(b.ctx, &ferry.EventFailParams{Lease: lease, Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.Advance(time.Second)
	receive(t, b, "stripe", "a_run")
	claimOne(t, b, "w1")
	receive(t, b, "stripe", "a_pending")
	receive(t, b, "github", "a_pending")

	// listed is what EventList shows of f's filter in the states f's
	// requeue takes.
	listed := func(f ferry.EventRequeueParams) []*ferry.Event {
		t.Helper()
		f.Actor = "op"
		normal, err := f.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		page, err := b.store.EventList(b.ctx, &ferry.EventListParams{
			Source: f.Source, Type: f.Type, EventIDContains: f.EventIDContains, States: normal.States,
			Since: f.Since, Until: f.Until, Before: f.Before, Limit: ferry.EventListLimitMax,
		})
		if err != nil {
			t.Fatal(err)
		}
		return page.Events
	}
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	all := ferry.States
	combined := ferry.EventRequeueParams{Source: "stripe", Type: "charge.failed", EventIDContains: "_", States: all, Since: at(1), Until: at(7), Before: ids[5]}
	for _, f := range []ferry.EventRequeueParams{
		{}, {States: all}, {States: []ferry.State{ferry.StateDone}},
		{Source: "github"}, {Source: "github", States: all}, {Type: "charge.failed", States: all},
		{EventIDContains: "a_", States: all}, {EventIDContains: "%", States: all}, {EventIDContains: "A_", States: all},
		{EventIDContains: "a_"}, {Since: at(3), States: all}, {Until: at(5), States: all}, {Since: at(2), Until: at(6), States: all},
		{Before: ids[4], States: all}, {Before: unknown}, combined,
	} {
		events := listed(f)
		dry := f
		dry.Actor, dry.DryRun = "op", true
		if n, err := b.store.EventRequeue(b.ctx, &dry); err != nil || n != len(events) {
			t.Errorf("requeue dry run of %+v = %d, %v; the list shows %d: %v", f, n, err, len(events), eventIDsOf(events))
		}
	}

	// The requeue itself takes the very events the list shows.
	events := listed(combined)
	if len(events) < 2 {
		t.Fatalf("the combined filter lists %d events: the test wants at least 2", len(events))
	}
	combined.Actor = "op"
	if n, err := b.store.EventRequeue(b.ctx, &combined); err != nil || n != len(events) {
		t.Fatalf("requeue = %d, %v; want %d", n, err, len(events))
	}
	for _, e := range events {
		wantState(t, b, e.ID, ferry.StatePending)
	}
}

// eventIDsOf is each event's EventID, for messages.
func eventIDsOf(events []*ferry.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.EventID
	}
	return out
}
