package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// An event pushed past its replay window is logged once as at risk, bursts
// are summed up, and an event held as unknown is logged once.
func TestAlertWatcher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, clock := teststore.SQLiteOnClock(t)
	for i := range alertBurst + 2 {
		if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
			Source: "stripe", EventID: fmt.Sprintf("evt_%02d", i), Payload: []byte(`{"secret_field":"pii"}`),
		}); err != nil {
			t.Fatal(err)
		}
	}
	// evt_00 failed once on an app that echoed the payload in its answer:
	// its last error is stored whole, and must not reach the alert line.
	claimed, err := store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute, Sources: []string{"stripe"}})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if _, err := store.EventFail(ctx, &ferry.EventFailParams{Lease: claimed[0].Event.Lease(), MaxAttempts: 25,
		Error: `forward: app answered 500 Internal Server Error: "bad request {\"secret_field\":\"pii\"}"`}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := newAlertWatcher(store, &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"stripe": 60 * time.Hour, "shop": 60 * time.Hour}},
		slog.New(slog.NewJSONHandler(&buf, nil)))

	lines := func() []map[string]any {
		t.Helper()
		if strings.Contains(buf.String(), "pii") {
			t.Error("a payload reached the log")
		}
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if l == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		buf.Reset()
		return out
	}

	w.check(ctx)
	if got := lines(); len(got) != 0 {
		t.Fatalf("young events: %v, want no warning", got)
	}
	clock.Advance(61 * time.Hour)
	w.check(ctx)
	got := lines()
	if len(got) != alertBurst+1 {
		t.Fatalf("got %d lines, want %d warnings and one summary: %v", len(got), alertBurst, got)
	}
	first := got[0]
	if first["level"] != "WARN" || first["alert"] != "at_risk" || first["source"] != "stripe" || first["event_id"] != "evt_00" || first["age"] != "61h0m0s" || first["attempt"] != float64(1) {
		t.Errorf("first warning = %v", first)
	}
	if last := got[alertBurst]; last["alert"] != "at_risk" || last["more"] != float64(2) {
		t.Errorf("summary = %v, want more=2", last)
	}
	w.check(ctx)
	if got := lines(); len(got) != 0 {
		t.Errorf("second check repeated warnings: %v", got)
	}

	// An event that finishes leaves the watch; replayed, it is warned
	// about again.
	claimed, err = store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute, Sources: []string{"stripe"}})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	again := claimed[0].Event
	if err := store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: again.Lease()}); err != nil {
		t.Fatal(err)
	}
	w.check(ctx)
	if got := lines(); len(got) != 0 {
		t.Errorf("a check after %s finished: %v, want no warning", again.EventID, got)
	}
	if n, err := store.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{again.ID}, Actor: "op"}); err != nil || n != 1 {
		t.Fatalf("requeue = %d, %v", n, err)
	}
	w.check(ctx)
	if got := lines(); len(got) != 1 || got[0]["alert"] != "at_risk" || got[0]["event_id"] != again.EventID {
		t.Errorf("after %s was replayed: %v, want one at_risk warning for it", again.EventID, got)
	}

	// An event of a hold source whose lease lapses is held as unknown.
	if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "shop", EventID: "order_1", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	claim := func() {
		if _, err := store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Second, Sources: []string{"shop"}, HoldSources: []string{"shop"}}); err != nil {
			t.Fatal(err)
		}
	}
	claim()
	clock.Advance(2 * time.Second)
	claim()
	w.check(ctx)
	got = lines()
	if len(got) != 1 || got[0]["alert"] != "unknown" || got[0]["event_id"] != "order_1" || got[0]["source"] != "shop" {
		t.Errorf("unknown: %v, want one alert=unknown line for shop/order_1", got)
	}
	w.check(ctx)
	if got := lines(); len(got) != 0 {
		t.Errorf("second check repeated: %v", got)
	}
}

// Events at risk past the watcher's list are counted, not seen: the
// summary says how many more came, once, not on every check.
func TestAlertWatcherBeyondTheList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, clock := teststore.SQLiteOnClock(t)
	receive := func(n int) {
		t.Helper()
		for range n {
			if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: fmt.Sprintf("evt_%d", clock.Now().UnixNano()), Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second)
		}
	}
	receive(6)
	var buf bytes.Buffer
	w := newAlertWatcher(store, &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"stripe": 60 * time.Hour}}, slog.New(slog.NewJSONHandler(&buf, nil)))
	w.params.AtRiskLimit = 3 // 1000 in serve
	summaries := func() []string {
		t.Helper()
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err == nil && m["more"] != nil {
				out = append(out, fmt.Sprintf("more=%v total=%v", m["more"], m["at_risk_total"]))
			}
		}
		buf.Reset()
		return out
	}
	clock.Advance(61 * time.Hour)
	w.check(ctx)
	if got := summaries(); len(got) != 1 || got[0] != "more=3 total=6" {
		t.Fatalf("first check: summaries %v, want one, more=3 total=6", got)
	}
	w.check(ctx)
	if got := summaries(); len(got) != 0 {
		t.Fatalf("second check, nothing new: summaries %v, want none", got)
	}
	receive(1)
	clock.Advance(61 * time.Hour)
	w.check(ctx)
	if got := summaries(); len(got) != 1 || got[0] != "more=1 total=7" {
		t.Fatalf("one more at risk past the list: summaries %v, want more=1 total=7", got)
	}
}

// runEvery runs its function at once, again on every tick, and returns when
// the context ends: the watcher, the pusher and the purger rely on all three.
func TestRunEvery(t *testing.T) {
	t.Parallel()
	t.Run("AtOnceAndStopsWithContext", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		runEvery(ctx, time.Hour, func(context.Context) { calls++; cancel() })
		if calls != 1 {
			t.Fatalf("%d calls before the first tick of an hour, want 1", calls)
		}
	})
	// The third call cancels once a tick is due, so that the end and the
	// tick are ready together: twenty runs, so that a loop that may take
	// the tick instead fails (one in 2^20 passes).
	t.Run("AgainOnEveryTickNotAfterTheEnd", func(t *testing.T) {
		t.Parallel()
		for range 20 {
			ctx, cancel := context.WithCancel(context.Background())
			calls := 0
			runEvery(ctx, time.Millisecond, func(context.Context) {
				if calls++; calls == 3 {
					time.Sleep(5 * time.Millisecond) // a tick is due
					cancel()
				}
			})
			cancel()
			if calls != 3 {
				t.Fatalf("%d calls, want 3 (the third cancels)", calls)
			}
		}
	})
}
