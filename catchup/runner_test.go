package catchup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
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

	t.Run("GapsAreWarned", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.pass(t, PassOptions{})
		b.now = b.now.Add(40 * 24 * time.Hour) // a 40-day outage
		res := b.pass(t, PassOptions{})
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "lookback") {
			t.Fatalf("warnings %q: want the part beyond lookback named", res.Warnings)
		}
		if !res.From.Equal(b.now.Add(-DefaultLookback)) {
			t.Fatalf("window starts %v, want now - lookback", res.From)
		}
		res = b.pass(t, PassOptions{Since: 45 * 24 * time.Hour})
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "out of the provider's reach") {
			t.Fatalf("warnings %q: want Stripe's 30 days named", res.Warnings)
		}
		if !strings.Contains(b.logsText(), "catchup: gap") {
			t.Fatalf("gap not logged:\n%s", b.logsText())
		}
	})

	// An outage longer than retention: the loop names the --since that
	// reaches back as far as the store allows, and that pass, though it
	// starts after the old checkpoint, covers all that can be fetched.
	t.Run("OutagePastRetentionIsClosedBySince", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.runner.Retention = 144 * time.Hour
		b.fake.add(1, b.now.Add(100*time.Hour), "kept") // 100h old after the outage
		loop := b.outage(t, 200*time.Hour)
		if loop.Advanced || len(loop.Warnings) != 1 || !strings.Contains(loop.Warnings[0], "run `ferry reconcile --since 144h`") {
			t.Fatalf("loop pass advanced %v, warnings %q: want the checkpoint left and --since 144h named", loop.Advanced, loop.Warnings)
		}
		b.now = b.now.Add(30 * time.Minute) // the operator reads the warning
		since := b.pass(t, PassOptions{Since: 144 * time.Hour})
		if cp, _ := checkpoint(t, b.store, "stripe"); !since.Advanced || !cp.Equal(since.To) {
			t.Fatalf("the --since pass the warning names left the checkpoint at %v: every later pass would warn again", cp)
		}
		if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: "evt_kept000"}); err != nil {
			t.Fatalf("an event within retention was not received: %v", err)
		}
		if next := b.pass(t, PassOptions{}); len(next.Warnings) != 0 {
			t.Fatalf("warnings after the gap was closed: %q", next.Warnings)
		}
	})

	// The provider's own limit is a reach too: a --since back to what it
	// keeps covers the gap, however old the checkpoint.
	t.Run("SinceToTheProviderLimitCoversTheGap", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		loop := b.outage(t, 40*24*time.Hour)
		if len(loop.Warnings) != 1 || !strings.Contains(loop.Warnings[0], "--since 721h") {
			t.Fatalf("warnings %q: want --since to Stripe's 30 days named", loop.Warnings)
		}
		if res := b.pass(t, PassOptions{Since: 30 * 24 * time.Hour}); !res.Advanced {
			t.Fatal("a pass back to all Stripe keeps left the checkpoint")
		}
	})

	// GitHub keeps 72h, the default lookback: after a longer outage no
	// --since can reach further, so the loop's own pass advances, and the
	// warning does not send the operator to run one.
	t.Run("LookbackAtTheProviderLimitAdvances", func(t *testing.T) {
		t.Parallel()
		b := setupGitHub(t, GitHubOptions{})
		res := b.outage(t, 4*24*time.Hour)
		if !res.Advanced {
			t.Fatal("a pass over all GitHub keeps left the checkpoint: every later pass would warn again")
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "cannot reach further: the provider keeps 72h") {
			t.Fatalf("warnings %q: want the provider's limit named, not a --since to run", res.Warnings)
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
		before := len(b.fake.requests())
		b2 := *b.runner
		b2.runOnce(context.Background(), lease, time.Minute)
		if after := len(b.fake.requests()); after != before {
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
		if _, err := NewGitHub(GitHubOptions{Hook: "app/hook", AppID: "1", PrivateKey: "not a key"}); !errors.Is(err, ErrConfig) {
			t.Fatalf("bad key: err = %v, want ErrConfig", err)
		}
	})
}
