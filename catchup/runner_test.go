package catchup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/sqlite"
)

func TestRunner(t *testing.T) {
	t.Parallel()

	t.Run("DryRunReceivesAndAdvancesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.add(30, base.Add(-time.Hour), "a")
		res := b.pass(t, PassOptions{DryRun: true})
		wantCounts(t, res, 30, 30, 0)
		list, _ := b.store.EventList(context.Background(), &ferry.EventListParams{})
		if len(list.Events) != 0 {
			t.Fatalf("a dry run stored %d events", len(list.Events))
		}
		if _, ok := checkpoint(t, b.store, "stripe"); ok || res.Advanced {
			t.Fatal("a dry run advanced the checkpoint")
		}
	})

	t.Run("SinceShorterThanTheGapLeavesTheCheckpoint", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		first := b.pass(t, PassOptions{})
		b.now = b.now.Add(48 * time.Hour)
		short := b.pass(t, PassOptions{Since: 24 * time.Hour})
		if cp, _ := checkpoint(t, b.store, "stripe"); short.Advanced || !cp.Equal(first.To) {
			t.Fatalf("a 24h pass after a 48h gap moved the checkpoint to %v: the 24h before it would never be fetched", cp)
		}
		long := b.pass(t, PassOptions{Since: 50 * time.Hour})
		if cp, _ := checkpoint(t, b.store, "stripe"); !long.Advanced || !cp.Equal(long.To) {
			t.Fatalf("a pass covering the gap left the checkpoint at %v", cp)
		}
	})

	// A fresh store's first short --since (trying the config) does not
	// move the checkpoint: the loop's first pass still covers its lookback.
	t.Run("ShortSinceOnAFreshStoreLeavesTheCheckpoint", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		if res := b.pass(t, PassOptions{Since: time.Hour}); res.Advanced {
			t.Fatal("a 1h pass on a fresh store advanced the checkpoint: the lookback before it would never be fetched")
		}
		if res := b.pass(t, PassOptions{}); !res.Advanced || !res.From.Equal(b.now.Add(-DefaultLookback)) {
			t.Fatalf("the first loop pass = from %v, advanced %v; want the whole lookback", res.From, res.Advanced)
		}
	})

	// No window reaches past the source's retention: an older event may
	// have been processed and purged, and would be received (and
	// forwarded) again as new.
	t.Run("NeverReachesPastRetention", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Retention = 144 * time.Hour
		b.fake.add(1, b.now.Add(-200*time.Hour), "forgotten")
		b.fake.add(1, b.now.Add(-100*time.Hour), "kept")
		res := b.pass(t, PassOptions{Since: 240 * time.Hour})
		if !res.From.Equal(b.now.Add(-144*time.Hour + DefaultOverlap)) {
			t.Fatalf("window from %v, want retention less the overlap", res.From)
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "retention 144h") {
			t.Fatalf("warnings %q: want the cut at retention named", res.Warnings)
		}
		ctx := context.Background()
		if _, err := b.store.EventGet(ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_forgotten000"}); !errors.Is(err, ferry.ErrNotFound) {
			t.Fatalf("an event older than retention was received: %v", err)
		}
		if _, err := b.store.EventGet(ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_kept000"}); err != nil {
			t.Fatalf("an event within retention was not received: %v", err)
		}
	})

	// Lookback only sets the first pass: a later pass starts at the
	// checkpoint, so a lookback shorter than the time between passes (or
	// than a restart) skips nothing.
	t.Run("ShortLookbackFollowsTheCheckpoint", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Lookback = 15 * time.Minute
		first := b.pass(t, PassOptions{})
		for i, gap := range []time.Duration{DefaultInterval + 5*time.Minute, 3 * time.Hour} {
			// Created after the last window's end, before this window's
			// start were it now - lookback.
			b.fake.add(1, first.To.Add(time.Minute), fmt.Sprintf("between%d", i))
			b.now = b.now.Add(gap)
			res := b.pass(t, PassOptions{})
			if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: fmt.Sprintf("evt_between%d000", i)}); err != nil {
				t.Fatalf("after %v: an event between two windows was never fetched: %v", gap, err)
			}
			if cp, _ := checkpoint(t, b.store, "stripe"); !res.Advanced || !cp.Equal(res.To) {
				t.Fatalf("after %v: checkpoint %v, want %v", gap, cp, res.To)
			}
			if !res.From.Equal(first.To.Add(-DefaultOverlap)) || len(res.Warnings) != 0 {
				t.Fatalf("after %v: window from %v with warnings %q; want the checkpoint less the overlap, %v", gap, res.From, res.Warnings, first.To.Add(-DefaultOverlap))
			}
			first = res
		}
	})

	// A checkpoint written by a host whose clock ran ahead is held to the
	// store's time of writing it: later passes would otherwise start after
	// events never listed.
	t.Run("CheckpointFromAClockAheadIsHeldToItsWrite", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.store = teststore.SQLite(t, &sqlite.Config{Now: func() time.Time { return base }})
		b.runner.Store = b.store
		ahead := base.Add(time.Hour) // written at base by a clock an hour fast
		if err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("stripe"), Value: ahead.Format(time.RFC3339Nano)}); err != nil {
			t.Fatal(err)
		}
		b.fake.add(1, base.Add(-5*time.Minute), "missed")
		b.now = base.Add(DefaultInterval)
		res := b.pass(t, PassOptions{})
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_missed000"}); err != nil {
			t.Fatalf("an event before the fast clock's checkpoint was never fetched: %v", err)
		}
		if !res.From.Equal(base.Add(-DefaultOverlap)) {
			t.Fatalf("window from %v, want the checkpoint's write less the overlap", res.From)
		}
		if cp, _ := checkpoint(t, b.store, "stripe"); !cp.Equal(res.To) {
			t.Fatalf("checkpoint %v, want this pass's end %v", cp, res.To)
		}
		if !strings.Contains(b.logsText(), "a clock ahead") {
			t.Fatalf("the clamp was not logged:\n%s", b.logsText())
		}
	})

	// On SQLite the store's clock is the host's: a host an hour fast writes
	// the checkpoint and its time of writing alike, then its clock steps
	// back. The checkpoint is later than now, and than the provider's now
	// (or no answer tells that), so the pass starts at the lookback instead
	// of waiting an hour and skipping what came between.
	for name, noDate := range map[string]bool{"CheckpointAheadOfNowStartsAtTheLookback": false, "CheckpointAheadOfNowWithNoDateStartsAtTheLookback": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupStripe(t, StripeOptions{})
			if noDate {
				b.fake.date = func() time.Time { return time.Time{} }
			}
			fast := base.Add(time.Hour)
			b.store = teststore.SQLite(t, &sqlite.Config{Now: func() time.Time { return fast }})
			b.runner.Store = b.store
			if err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("stripe"), Value: fast.Add(-DefaultSettle).Format(time.RFC3339Nano)}); err != nil {
				t.Fatal(err)
			}
			b.fake.add(1, base.Add(5*time.Minute), "after_step")
			b.now = base.Add(10 * time.Minute) // the clock stepped back
			res := b.pass(t, PassOptions{})
			if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_after_step000"}); err != nil {
				t.Fatalf("an event after the step back was not fetched: %v", err)
			}
			if !res.From.Equal(b.now.Add(-DefaultLookback)) || !res.Advanced {
				t.Fatalf("window from %v, advanced %v; want the lookback, %v, and the checkpoint moved", res.From, res.Advanced, b.now.Add(-DefaultLookback))
			}
			if !strings.Contains(b.logsText(), "checkpoint later than now") {
				t.Fatalf("the reset was not logged:\n%s", b.logsText())
			}
		})
	}

	// A reader a few minutes behind the writer (reconcile on a laptop just
	// after serve's pass) keeps the checkpoint: the overlap covers the
	// difference, and the lookback is not listed again.
	t.Run("CheckpointWithinTheOverlapAheadIsKept", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		ahead := base.Add(5 * time.Minute)
		if err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("stripe"), Value: ahead.Format(time.RFC3339Nano)}); err != nil {
			t.Fatal(err)
		}
		b.now = base
		res := b.pass(t, PassOptions{})
		if !res.From.Equal(ahead.Add(-DefaultOverlap)) || strings.Contains(b.logsText(), "checkpoint later than now") {
			t.Fatalf("window from %v, want the checkpoint less the overlap, %v, and no reset:\n%s", res.From, ahead.Add(-DefaultOverlap), b.logsText())
		}
	})

	// A host clock 30 minutes ahead of the provider's: the provider's Date
	// bounds the window, so the checkpoint never claims time the provider
	// has yet to reach, and an event it creates between two passes is
	// listed by the next. Ended by the host's clock, the checkpoint would
	// be 28 minutes ahead and the next pass would start after the event.
	for name, provider := range map[string]func(t *testing.T) (*runBundle, func(id string, at time.Time), func(date func() time.Time)){
		"Stripe": func(t *testing.T) (*runBundle, func(string, time.Time), func(func() time.Time)) {
			b := setupStripe(t, StripeOptions{})
			return &b.runBundle, func(id string, at time.Time) { b.fake.addType(id, "invoice.paid", at) },
				func(date func() time.Time) { b.fake.date = date }
		},
		"GitHub": func(t *testing.T) (*runBundle, func(string, time.Time), func(func() time.Time)) {
			b := setupGitHub(t, GitHubOptions{})
			return &b.runBundle, func(id string, at time.Time) { b.fake.add(id, "push", at, 500) },
				func(date func() time.Time) { b.fake.date = date }
		},
	} {
		t.Run("ProviderClockBehindBoundsTheWindow"+name, func(t *testing.T) {
			t.Parallel()
			b, add, setDate := provider(t)
			const behind = 30 * time.Minute
			setDate(func() time.Time { return b.now.Add(-behind) })
			b.now = base
			add("evt_unsettled", base.Add(-behind-time.Minute)) // within settle, by the provider's clock
			first := b.pass(t, PassOptions{})
			if want := base.Add(-behind - DefaultSettle); !first.To.Equal(want) {
				t.Fatalf("window to %v, want the provider's now less settle, %v", first.To, want)
			}
			if cp, _ := checkpoint(t, b.store, b.runner.Source); !cp.Equal(first.To) {
				t.Fatalf("checkpoint %v, want %v: past the provider's now less settle", cp, first.To)
			}
			if first.Fetched != 0 {
				t.Fatalf("fetched %d: an event not settled by the provider's clock was taken", first.Fetched)
			}
			if len(first.Warnings) != 1 || !strings.Contains(first.Warnings[0], "30m0s ahead of the provider's") ||
				!strings.Contains(b.logsText(), "catchup: clock skew") {
				t.Fatalf("warnings %q: want the skew named, and logged:\n%s", first.Warnings, b.logsText())
			}
			// Created by the provider between the passes.
			add("evt_between", base.Add(-20*time.Minute))
			b.now = base.Add(DefaultInterval)
			b.pass(t, PassOptions{})
			for _, id := range []string{"evt_unsettled", "evt_between"} {
				if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: b.runner.Source, EventID: id}); err != nil {
					t.Fatalf("%s was never listed: %v", id, err)
				}
			}
		})
	}

	// A gateway's page before the API answers (a 502 in HTML, its own
	// clock an hour behind) is not the provider's clock: it neither
	// bounds the window nor warns of skew.
	t.Run("GatewayPageDateIsNotTheProvidersClock", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.fail = func(n int, w http.ResponseWriter, _ *http.Request) bool {
			if n > 1 {
				return false
			}
			w.Header().Set("Date", base.Add(-time.Hour).Format(http.TimeFormat))
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "<html>502 Bad Gateway</html>")
			return true
		}
		b.wantHostClockWindow(t)
	})

	// An answer without a Date leaves the host's clock in charge.
	t.Run("NoDateFallsBackToTheHostClock", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.date = func() time.Time { return time.Time{} }
		b.wantHostClockWindow(t)
	})

	// An outage longer than anything the provider keeps: the loop fetches
	// all it still has, says what is lost, and advances.
	t.Run("OutagePastTheProviderIsCutThere", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.pass(t, PassOptions{})
		b.now = b.now.Add(40 * 24 * time.Hour)
		b.fake.add(1, b.now.Add(-20*24*time.Hour), "lost_by_lookback")
		res := b.pass(t, PassOptions{})
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "out of the provider's reach") {
			t.Fatalf("warnings %q: want Stripe's 30 days named", res.Warnings)
		}
		if !res.From.Equal(b.now.Add(-30*24*time.Hour)) || !res.Advanced {
			t.Fatalf("window from %v, advanced %v; want all Stripe keeps, and the checkpoint moved", res.From, res.Advanced)
		}
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_lost_by_lookback000"}); err != nil {
			t.Fatalf("an event of the outage older than lookback was not fetched: %v", err)
		}
		if !strings.Contains(b.logsText(), "catchup: gap") {
			t.Fatalf("gap not logged:\n%s", b.logsText())
		}
	})

	// An outage longer than retention: the loop's pass reaches back as far
	// as the store allows, says so, and advances the checkpoint.
	t.Run("OutagePastRetentionIsCutThere", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Retention = 144 * time.Hour
		b.fake.add(1, b.now.Add(100*time.Hour), "kept") // 100h old after the outage
		loop := b.outage(t, 200*time.Hour)
		if !loop.Advanced || len(loop.Warnings) != 1 || !strings.Contains(loop.Warnings[0], "retention 144h") {
			t.Fatalf("loop pass advanced %v, warnings %q: want the cut at retention named, and the checkpoint moved", loop.Advanced, loop.Warnings)
		}
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_kept000"}); err != nil {
			t.Fatalf("an event within retention was not received: %v", err)
		}
		if next := b.pass(t, PassOptions{}); len(next.Warnings) != 0 {
			t.Fatalf("warnings after the gap was closed: %q", next.Warnings)
		}
	})

	// GitHub keeps 72h: after a longer outage the loop's pass reaches back
	// to all it keeps, and advances.
	t.Run("OutagePastGitHubAdvances", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		res := b.outage(t, 4*24*time.Hour)
		if !res.Advanced {
			t.Fatal("a pass over all GitHub keeps left the checkpoint: every later pass would warn again")
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "it keeps 72h") {
			t.Fatalf("warnings %q: want the provider's limit named", res.Warnings)
		}
	})

	// A window the pass timeout cuts short (a first pass over a busy
	// account): each pass keeps the steps it finished, oldest first, and
	// the next resumes there, until the window is caught up.
	t.Run("TimedOutPassesResume", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		for h := range 72 {
			b.fake.add(10, b.now.Add(-DefaultLookback+time.Duration(h)*time.Hour+30*time.Minute), fmt.Sprintf("h%02d", h))
		}
		// Listing the 720 events takes over 2s: no 1s pass lists them all.
		b.fake.delay = 3 * time.Millisecond
		lease := &ferry.LeaseAcquireParams{Name: CheckpointName("stripe"), Owner: "test", TTL: time.Hour}
		end := b.now.Add(-DefaultSettle)
		marks := []time.Time{{}} // the checkpoint after each pass that moved it
		for stalled := 0; ; {
			b.runner.runOnce(context.Background(), lease, time.Second)
			cp, _ := checkpoint(t, b.store, "stripe")
			if !cp.After(marks[len(marks)-1]) {
				if stalled++; stalled == 5 {
					t.Fatalf("5 passes in a row left the checkpoint at %v (marks %v)", cp, marks)
				}
				continue
			}
			stalled = 0
			marks = append(marks, cp)
			if cp.Equal(end) {
				break
			}
		}
		if len(marks) < 3 {
			t.Fatalf("checkpoints %v: want one short of the end before it", marks)
		}
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_h00000"}); err != nil {
			t.Fatalf("the oldest event was never received: %v", err)
		}
		list, _ := b.store.EventList(context.Background(), &ferry.EventListParams{Limit: 1000})
		if len(list.Events) != 720 {
			t.Fatalf("%d events stored, want 720", len(list.Events))
		}
	})

	// Providers filter on whole seconds: steps end on a whole second, so
	// a window starting mid-second (a checkpoint a cut-short pass left)
	// never lists a boundary's second twice.
	t.Run("StepsShareNoSecond", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		mark := b.now.Add(-3*time.Hour + 500*time.Millisecond)
		if err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("stripe"), Value: mark.Format(time.RFC3339Nano)}); err != nil {
			t.Fatal(err)
		}
		from := mark.Add(-DefaultOverlap).Truncate(time.Second)
		b.fake.add(1, from.Add(time.Hour), "first_boundary")
		b.fake.add(1, from.Add(2*time.Hour), "second_boundary")
		if res := b.pass(t, PassOptions{}); res.Fetched != 2 {
			t.Fatalf("2 events listed %d times: a step boundary's second was listed by both steps", res.Fetched)
		}
	})

	t.Run("OneInstanceAtATime", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.add(5, base.Add(-time.Hour), "a")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.runner.Run(ctx, time.Hour, "instance-a") }()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if cp, _ := checkpoint(t, b.store, "stripe"); cp.Equal(b.now.Add(-DefaultSettle)) {
				break // the pass is over
			}
			if time.Now().After(deadline) {
				t.Fatal("no pass completed in 30s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		lease := &ferry.LeaseAcquireParams{Name: CheckpointName("stripe"), Owner: "instance-b", TTL: time.Minute}
		if held, err := b.store.LeaseAcquire(context.Background(), lease); err != nil || held {
			t.Fatalf("instance b took the lease while a runs: %v %v", held, err)
		}
		before := len(b.fake.requests.all())
		b2 := &Runner{Source: b.runner.Source, Reconciler: b.runner.Reconciler, Store: b.runner.Store, Logger: b.runner.Logger, Now: b.runner.Now}
		b2.runOnce(context.Background(), lease, time.Minute)
		if after := len(b.fake.requests.all()); after != before {
			t.Fatalf("instance b ran a pass (%d requests) while a holds the lease", after-before)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if held, err := b.store.LeaseAcquire(context.Background(), lease); err != nil || !held {
			t.Fatalf("a stopped but b cannot take the lease: %v %v", held, err)
		}
	})

	// A failed pass gives the lease up: an instance whose route to the
	// provider is broken must not keep renewing it while another could
	// fetch. A pass that ends ok keeps it (OneInstanceAtATime).
	t.Run("FailedPassLetsAnotherInstanceTry", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.add(5, base.Add(-time.Hour), "a")
		var unreachable atomic.Bool // from instance a only
		unreachable.Store(true)
		b.fake.fail = func(_ int, w http.ResponseWriter, _ *http.Request) bool {
			down := unreachable.Load()
			if down {
				w.WriteHeader(http.StatusBadGateway)
			}
			return down
		}
		ctx := context.Background()
		a := &ferry.LeaseAcquireParams{Name: CheckpointName("stripe"), Owner: "instance-a", TTL: time.Hour}
		b.runner.runOnce(ctx, a, time.Minute)
		if !strings.Contains(b.logs.String(), "pass failed") {
			t.Fatalf("instance a's pass did not fail:\n%s", b.logs.String())
		}
		if f, err := ReadFailure(ctx, b.store, "stripe"); err != nil || f == nil || !strings.Contains(f.Err, "HTTP 502") {
			t.Errorf("the kept failure after a's pass: %+v, %v; want the error", f, err)
		}
		if !strings.Contains(b.logs.String(), `"owner":"instance-a"`) {
			t.Errorf("the failed pass's line does not name its instance (owner instance-a):\n%s", b.logs.String())
		}
		unreachable.Store(false) // instance b reaches the provider
		other := *a
		other.Owner = "instance-b"
		b.runner.runOnce(ctx, &other, time.Minute)
		if cp, ok := checkpoint(t, b.store, "stripe"); !ok || !cp.Equal(b.now.Add(-DefaultSettle)) {
			t.Fatalf("instance b did not take over after a's failed pass: checkpoint %v %v", cp, ok)
		}
		// Cleared, not only older than the checkpoint: a pass may end ok
		// without moving it.
		if f, err := b.store.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: FailureName("stripe")}); err != nil || f.Value != "" {
			t.Errorf("the kept failure after b's pass ended ok: %+v, %v; want it cleared", f, err)
		}
		if held, err := b.store.LeaseAcquire(ctx, a); err != nil || held {
			t.Fatalf("instance a took the lease back from b, whose pass ended ok: %v %v", held, err)
		}
	})

	// The kept failure says when the failing began: the first failed pass
	// after an ok one (or ever), however many fail after it, and cut to
	// maxFailureBytes of UTF-8 however long the error. Doctor fails a
	// source failing from the start for long enough by it.
	t.Run("KeptFailureSaysWhenTheFailingBegan", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		store, clock := teststore.SQLiteOnClock(t)
		b.store, b.runner.Store = store, store
		b.fake.add(1, base.Add(-time.Hour), "a")
		up := b.runner.Reconciler
		down := failingReconciler{up, errors.New("HTTP 502")}
		ctx := context.Background()
		lease := &ferry.LeaseAcquireParams{Name: CheckpointName("stripe"), Owner: "instance-a", TTL: time.Hour}
		pass := func() *Failure {
			t.Helper()
			b.runner.runOnce(ctx, lease, time.Minute)
			f, err := ReadFailure(ctx, store, "stripe")
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(20 * time.Minute)
			return f
		}
		b.runner.Reconciler = down
		first := pass()
		if first == nil || !first.Since.Equal(first.At) {
			t.Fatalf("after the first failed pass: %+v; want a failure failing since it", first)
		}
		if again := pass(); again == nil || !again.At.After(first.At) || !again.Since.Equal(first.At) {
			t.Fatalf("after a second failed pass: %+v; want it failing since the first, %v", again, first.At)
		}
		b.runner.Reconciler = up
		if f := pass(); f != nil {
			t.Fatalf("after an ok pass: %+v; want no kept failure", f)
		}
		b.runner.Reconciler = down
		if f := pass(); f == nil || !f.Since.Equal(f.At) || !f.Since.After(first.At) {
			t.Fatalf("a failure after an ok pass: %+v; want it failing since itself", f)
		}
		// é is 2 bytes: with one pad or the other, the cut falls inside one.
		for _, pad := range []string{"", " "} {
			b.runner.Reconciler = failingReconciler{up, errors.New("HTTP 502:" + pad + strings.Repeat("é", maxFailureBytes))}
			if f := pass(); f == nil || len(f.Err) > maxFailureBytes || !utf8.ValidString(f.Err) || !strings.Contains(f.Err, "HTTP 502:"+pad+"éé") {
				t.Errorf("a long error kept as %+v; want at most %d bytes of UTF-8 naming the 502", f, maxFailureBytes)
			}
		}
	})

	// A pass whose lease passed to another instance mid-pass (it paused
	// past the lease's TTL) moves no checkpoint: its write could move back
	// the new holder's.
	t.Run("PassThatLostItsLeaseMovesNoCheckpoint", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.add(5, base.Add(-time.Hour), "a")
		ctx := context.Background()
		lease := &ferry.LeaseAcquireParams{Name: CheckpointName("stripe"), Owner: "instance-a", TTL: time.Minute}
		b.fake.fail = func(n int, w http.ResponseWriter, r *http.Request) bool {
			if n == 1 { // a's lease ends and b takes it while a lists
				if err := b.store.LeaseRelease(ctx, &ferry.LeaseReleaseParams{Name: lease.Name, Owner: lease.Owner}); err != nil {
					t.Error(err)
				}
				if held, err := b.store.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: lease.Name, Owner: "instance-b", TTL: time.Minute}); err != nil || !held {
					t.Errorf("instance b could not take the lease: %v %v", held, err)
				}
			}
			return false
		}
		b.runner.runOnce(ctx, lease, time.Minute)
		if cp, ok := checkpoint(t, b.store, "stripe"); ok {
			t.Fatalf("a pass that lost its lease wrote the checkpoint %v", cp)
		}
		if !strings.Contains(b.logs.String(), "lease lost") {
			t.Fatalf("the failed pass logged no lost lease:\n%s", b.logs.String())
		}
		// Nor its failure: the kept error is the lease holder's to write.
		if f, err := ReadFailure(ctx, b.store, "stripe"); err != nil || f != nil {
			t.Errorf("a pass that lost its lease kept its failure: %+v, %v", f, err)
		}
	})

	// A payload the receiver would refuse with 413 is not stored by
	// catch-up either: skipped with a warning, the pass goes on.
	t.Run("PayloadOverMaxBodyIsSkipped", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct {
			maxBody int64
			limit   int
		}{
			"Default":    {0, ferryhttp.DefaultMaxBodyBytes},
			"Configured": {2048, 2048},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setupListed(t, listed{
					"at_limit":   {Type: "test", Payload: bytes.Repeat([]byte("a"), tc.limit)},
					"over_limit": {Type: "test", Payload: bytes.Repeat([]byte("o"), tc.limit+1)},
				})
				b.runner.MaxBody = tc.maxBody
				b.wantOneNewAndSkipped(t, 1)
				if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "listed", EventID: "over_limit"}); !errors.Is(err, ferry.ErrNotFound) {
					t.Fatalf("a payload over the limit was stored: %v", err)
				}
				if !strings.Contains(b.logsText(), "skipped an event") || !strings.Contains(b.logsText(), "raise max_body") || strings.Contains(b.logsText(), "ooooo") {
					t.Fatalf("want the skip logged, naming the key to raise, without the payload:\n%.2000s", b.logsText())
				}
			})
		}
	})

	// An event whose id or type no store can keep is skipped with a
	// warning that leaves the id out (it may be anything): failing the
	// pass would fail every pass while the provider lists it.
	t.Run("UnstorableEventIsSkipped", func(t *testing.T) {
		t.Parallel()
		b := setupListed(t, listed{
			"qq\x00qq": {Type: "test", Payload: []byte(`{}`)},
			"bad_type": {Type: strings.Repeat("t", ferry.MaxEventTypeBytes+1), Payload: []byte(`{}`)},
			"good":     {Type: "test", Payload: []byte(`{}`)},
		})
		b.wantOneNewAndSkipped(t, 2)
		list, err := b.store.EventList(context.Background(), &ferry.EventListParams{})
		if err != nil || len(list.Events) != 1 || list.Events[0].EventID != "good" {
			t.Fatalf("stored %v (%v), want only the good event", list, err)
		}
		if n := strings.Count(b.logsText(), "skipped an event"); n != 2 || strings.Contains(b.logsText(), "qq") {
			t.Fatalf("%d skips logged, want 2 without the unstorable id:\n%s", n, b.logsText())
		}
	})

	// A fetch that keeps failing (a 5xx after every retry, an answer that
	// does not decode) is passed over like a refusal: the events listed
	// after it, older at GitHub, are taken, the checkpoint stays, the pass
	// fails, and the next pass fetches it.
	t.Run("FailingFetchDoesNotBlockTheRest", func(t *testing.T) {
		t.Parallel()
		f := &flaky{ids: []string{"a", "b", "c", "d"}, errs: map[string]error{"b": errFetch}}
		b, res, err := flakyPass(t, f)
		if err == nil || !strings.Contains(err.Error(), "fetch b: HTTP 502 after every try") || !strings.Contains(err.Error(), "refused or failed 1 for now") {
			t.Fatalf("err = %v, want the pass failed naming b's fetch", err)
		}
		if res.New != 3 || res.Advanced {
			t.Fatalf("new=%d advanced=%v, want the 3 others taken and the checkpoint left", res.New, res.Advanced)
		}
		if _, ok := checkpoint(t, b.store, "flaky"); ok {
			t.Fatal("the checkpoint advanced past an event not fetched")
		}
		if n := strings.Count(b.logsText(), "could not fetch an event"); n != 1 {
			t.Fatalf("%d failed fetches logged, want 1:\n%s", n, b.logsText())
		}
		f.errs = nil
		res = b.pass(t, PassOptions{})
		if res.New != 1 || !res.Advanced {
			t.Fatalf("next pass: new=%d advanced=%v, want b taken and the checkpoint moved", res.New, res.Advanced)
		}
	})

	// Fetches failing in a row are the provider failing, not one event:
	// the pass ends at the third instead of spending every further
	// fetch's retries.
	t.Run("FetchesFailingInARowEndThePass", func(t *testing.T) {
		t.Parallel()
		f := &flaky{ids: []string{"a", "b", "c", "d", "e", "f", "g"}, errs: map[string]error{"b": errFetch, "d": errFetch, "e": errFetch, "f": errFetch}}
		_, res, err := flakyPass(t, f)
		if err == nil || !strings.Contains(err.Error(), "3 fetches failed in a row") || !strings.Contains(err.Error(), "fetch f:") {
			t.Fatalf("err = %v, want the pass ended at the third fetch failing in a row", err)
		}
		if res.New != 2 || res.Advanced {
			t.Fatalf("new=%d advanced=%v, want a and c taken (c between two failures resets the count), nothing advanced", res.New, res.Advanced)
		}
		if want := []string{"a", "b", "c", "d", "e", "f"}; !slices.Equal(f.fetched, want) {
			t.Fatalf("fetched %v, want %v: g, after the third failure in a row, not asked for", f.fetched, want)
		}

		// Any answer of the provider breaks the row: an event it will never
		// return (skipped), or one it refuses for now.
		for _, answer := range []error{ErrUnfetchable, ErrRefusedForNow} {
			f = &flaky{ids: []string{"a", "b", "c", "d", "e", "f"}, errs: map[string]error{"b": errFetch, "c": answer, "d": errFetch, "e": errFetch}}
			_, res, err = flakyPass(t, f)
			if err == nil || strings.Contains(err.Error(), "in a row") || res.New != 2 {
				t.Fatalf("c answered %v: err = %v, new=%d; want the pass to go on past e, a and f taken", answer, err, res.New)
			}
		}
	})

	// An interval so long that, once an instance crashed holding the
	// lease, an event could age out of the provider's or the store's reach
	// before any pass looked at it, is refused.
	t.Run("IntervalPastReachIsRefused", func(t *testing.T) {
		t.Parallel()
		gh, err := NewGitHub(GitHubOptions{Hook: "repos/a/b/hooks/1", Token: "ghp_x"})
		if err != nil {
			t.Fatal(err)
		}
		st, err := NewStripe(StripeOptions{APIKey: "sk_x", Types: []string{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(context.Background())
		cancel() // Run returns at once once it has taken the interval
		for _, tc := range []struct {
			rec       Reconciler
			retention time.Duration
			interval  time.Duration
			refused   bool
		}{
			{gh, 0, 96 * time.Hour, true},
			{gh, 0, 11*time.Hour + 59*time.Minute + 41*time.Second, true},
			{gh, 0, 11*time.Hour + 59*time.Minute + 40*time.Second, false},
			// The store's 144h less the overlap binds before Stripe's 30 days.
			{st, 144 * time.Hour, 23*time.Hour + 58*time.Minute + time.Second, true},
			{st, 144 * time.Hour, 23*time.Hour + 58*time.Minute, false},
			{listed{}, 0, 1000 * time.Hour, false}, // no bound
		} {
			r := &Runner{Source: "s", Reconciler: tc.rec, Store: teststore.SQLite(t, nil), Retention: tc.retention}
			err := r.Run(done, tc.interval, "x")
			if refused := errors.Is(err, ErrConfig); refused != tc.refused {
				t.Errorf("%T retention %v interval %v: err = %v, want refused %v", tc.rec, tc.retention, tc.interval, err, tc.refused)
			}
		}
		if d, ok := MaxInterval(3*24*time.Hour, 0); !ok || d != 11*time.Hour+59*time.Minute+40*time.Second {
			t.Errorf("MaxInterval(72h, 0) = %v, %v; want 11h59m40s", d, ok)
		}
		// Below 5m a pass still gets 5m: 3 intervals + 15m + the settle.
		if d, ok := MaxInterval(30*time.Minute, 0); !ok || d != 4*time.Minute+20*time.Second {
			t.Errorf("MaxInterval(30m, 0) = %v, %v; want 4m20s", d, ok)
		}
		if _, ok := MaxInterval(0, 0); ok {
			t.Error("MaxInterval(0, 0) is bounded, want no bound")
		}
	})

	t.Run("MissingSettingsAreRefused", func(t *testing.T) {
		t.Parallel()
		if _, err := (&Runner{}).Pass(context.Background(), PassOptions{}); !errors.Is(err, ErrConfig) {
			t.Fatalf("err = %v, want ErrConfig", err)
		}
		if _, err := NewStripe(StripeOptions{}); !errors.Is(err, ErrConfig) {
			t.Fatalf("no key: err = %v, want ErrConfig", err)
		}
		if _, err := NewGitHub(GitHubOptions{Hook: "repos/a/b", Token: "x"}); !errors.Is(err, ErrConfig) {
			t.Fatalf("bad hook: err = %v, want ErrConfig", err)
		}
		// Credentials in api_base are never sent, and would reach errors.
		for name, make := range map[string]func() error{
			"stripe": func() error {
				_, err := NewStripe(StripeOptions{APIKey: "k", Types: []string{"*"}, APIBase: "https://u:SEKRET@api.example"})
				return err
			},
			"github": func() error {
				_, err := NewGitHub(GitHubOptions{Hook: "repos/a/b/hooks/1", Token: "x", APIBase: "https://u:SEKRET@api.example"})
				return err
			},
		} {
			err := make()
			if oe, ok := errors.AsType[*OptionError](err); !ok || oe.Option != "api_base" || strings.Contains(err.Error(), "SEKRET") {
				t.Errorf("%s: api_base with credentials: err = %v, want an api_base OptionError without them", name, err)
			}
		}
		if _, err := NewGitHub(GitHubOptions{Hook: "app/hook", AppID: "1", PrivateKey: "not a key"}); !errors.Is(err, ErrConfig) {
			t.Fatalf("bad key: err = %v, want ErrConfig", err)
		}
		if _, err := NewGitHub(GitHubOptions{Hook: "app/hook", Token: "ghp_x"}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "app_id and private_key") {
			t.Fatalf("an App's hook with a token: err = %v, want ErrConfig naming app_id and private_key", err)
		}
	})
}

// listed is a Reconciler that lists fixed events by id, none delivered.
type listed map[string]*Event

func (l listed) List(_ context.Context, _ Window, found func(*Candidate) error) error {
	for _, id := range slices.Sorted(maps.Keys(l)) {
		ev := l[id]
		if err := found(&Candidate{ID: id, Fetch: func(context.Context) (*Event, error) { return ev, nil }}); err != nil {
			return err
		}
	}
	return nil
}

func (listed) Retention() time.Duration { return 0 }

// flaky is a Reconciler that lists ids in order and fails the fetch of
// those in errs with their error (errFetch: a provider's 5xx after every
// retry). fetched records each fetch asked for.
type flaky struct {
	ids     []string
	errs    map[string]error
	fetched []string
}

var errFetch = errors.New("HTTP 502 after every try")

func (f *flaky) List(_ context.Context, _ Window, found func(*Candidate) error) error {
	for _, id := range f.ids {
		err := found(&Candidate{ID: id, Fetch: func(context.Context) (*Event, error) {
			f.fetched = append(f.fetched, id)
			if err := f.errs[id]; err != nil {
				return nil, err
			}
			return &Event{Type: "test", Payload: []byte(`{}`)}, nil
		}})
		if err != nil {
			return err
		}
	}
	return nil
}

func (*flaky) Retention() time.Duration { return 0 }

// flakyPass runs a first pass over f, which may fail, and returns the
// bundle for the next.
func flakyPass(t *testing.T, f *flaky) (*runBundle, *Result, error) {
	t.Helper()
	b := newRunBundle(t)
	b.start("flaky", f, slog.LevelInfo)
	b.runner.Lookback = time.Hour // one step: the events are listed once
	res, err := b.runner.Pass(context.Background(), PassOptions{})
	return &b, res, err
}

// wantHostClockWindow runs a pass whose window must end at the host's
// clock less the settle, with no warning: no provider's Date bounded it.
func (b *runBundle) wantHostClockWindow(t *testing.T) {
	t.Helper()
	res := b.pass(t, PassOptions{})
	if want := base.Add(-DefaultSettle); !res.To.Equal(want) || len(res.Warnings) != 0 {
		t.Fatalf("window to %v with warnings %q, want %v and none", res.To, res.Warnings, want)
	}
}

func setupListed(t *testing.T, l listed) *runBundle {
	t.Helper()
	b := newRunBundle(t)
	b.start("listed", l, slog.LevelInfo)
	b.runner.Lookback = time.Hour // one step: the events are listed once
	return &b
}

// wantOneNewAndSkipped runs a pass that must store one event, skip
// skipped others and still advance, reporting each to the Observer.
func (b *runBundle) wantOneNewAndSkipped(t *testing.T, skipped int) {
	t.Helper()
	obs := eventCounts{}
	b.runner.Observer = obs
	res := b.pass(t, PassOptions{})
	if res.New != 1 || res.Skipped != skipped || !res.Advanced {
		t.Fatalf("new=%d skipped=%d advanced=%v, want 1 %d true", res.New, res.Skipped, res.Advanced, skipped)
	}
	if want := (eventCounts{OutcomeNew: 1, OutcomeSkipped: skipped}); !maps.Equal(obs, want) {
		t.Errorf("observed %v, want %v", obs, want)
	}
}

// eventCounts is an Observer that counts events by outcome, as
// prometheus.CatchupMetrics does on /metrics. Pass calls it on the
// caller's goroutine.
type eventCounts map[string]int

func (o eventCounts) CatchupEvent(_, outcome string) { o[outcome]++ }

func (eventCounts) CatchupPass(string, string) {}

// failingReconciler is a Reconciler whose every List fails with err.
type failingReconciler struct {
	Reconciler
	err error
}

func (f failingReconciler) List(context.Context, Window, func(*Candidate) error) error { return f.err }
