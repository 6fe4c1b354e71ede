package catchup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// A checkpoint written ahead of the provider's clock (by an older build,
// on a host whose clock ran fast) is found out by the provider's Date and
// moved back, so the events it skipped are listed. On SQLite the store's
// time of writing is the host's, so only the provider's clock shows it.
func TestCheckpointAheadOfTheProvider(t *testing.T) {
	t.Parallel()
	const behind = 30 * time.Minute // the provider's clock, behind this host's

	// setup has the provider 30 minutes behind, and a checkpoint at at.
	setup := func(t *testing.T, at time.Time) *stripeBundle {
		b := setupStripe(t, StripeOptions{})
		b.fake.date = func() time.Time { return b.now.Add(-behind) }
		b.now = base
		putCheckpoint(t, b, at)
		return b
	}
	stored := func(t *testing.T, b *stripeBundle, id string) bool {
		_, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: id})
		return err == nil
	}

	// 28 minutes ahead of the provider: an event it creates after the
	// first pass is stored by the second. Before, every pass started at
	// the checkpoint less the overlap, after the event, and the provider's
	// clock bounded every window's end below it: it was never listed.
	t.Run("EventAfterTheFirstPass", func(t *testing.T) {
		t.Parallel()
		b := setup(t, base.Add(-2*time.Minute))
		first := b.pass(t, PassOptions{})
		if !strings.Contains(strings.Join(first.Warnings, "\n"), "listing again from the lookback") {
			t.Fatalf("warnings %q: want the checkpoint ahead of the provider named", first.Warnings)
		}
		b.fake.addType("evt_gap", "invoice.paid", base.Add(-25*time.Minute))
		b.now = base.Add(DefaultInterval)
		b.pass(t, PassOptions{})
		if !stored(t, b, "evt_gap") {
			t.Fatalf("the event in the gap was not stored by the second pass:\n%s", b.logsText())
		}
	})

	// 15 minutes ahead: within the overlap of the provider's clock by the
	// next pass, so only the first can see it ahead. It lists again from
	// the lookback at once, and takes the event the provider created before
	// it, short of the checkpoint less the overlap.
	t.Run("WithinTheOverlapByTheNextPass", func(t *testing.T) {
		t.Parallel()
		b := setup(t, base.Add(-15*time.Minute))
		b.fake.addType("evt_gap", "invoice.paid", base.Add(-35*time.Minute))
		first := b.pass(t, PassOptions{})
		if !stored(t, b, "evt_gap") || first.New != 1 {
			t.Fatalf("first pass new %d: the event before the checkpoint less the overlap was not stored:\n%s", first.New, b.logsText())
		}
		if cp, _ := checkpoint(t, b.store, "stripe"); !cp.Equal(first.To) || !first.To.Equal(base.Add(-behind-DefaultSettle)) {
			t.Fatalf("checkpoint %v, window to %v: want both moved back to the provider's now less settle, %v", cp, first.To, base.Add(-behind-DefaultSettle))
		}
	})

	// The host's clock fixed after a pass that ran 30 minutes fast: the
	// checkpoint that pass wrote, bounded by the provider's clock, is
	// trusted, and the next window starts at it less the overlap, not at
	// the lookback.
	t.Run("HostClockFixedKeepsTheCheckpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t, base.Add(-behind-DefaultSettle-DefaultInterval))
		first := b.pass(t, PassOptions{})
		b.now = base.Add(-behind + DefaultInterval) // NTP: the host now tells the provider's time
		b.fake.date = func() time.Time { return b.now }
		res := b.pass(t, PassOptions{})
		if want := first.To.Add(-DefaultOverlap); !res.From.Equal(want) {
			t.Fatalf("window from %v, want the checkpoint less the overlap, %v:\n%s", res.From, want, b.logsText())
		}
	})

	// --since lists its own window: with the checkpoint ahead it says how
	// to move it back rather than list twice, and counts each event once.
	t.Run("SinceListsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, base.Add(-2*time.Minute))
		b.fake.addType("evt_1", "invoice.paid", base.Add(-time.Hour))
		res := b.pass(t, PassOptions{Since: 2 * time.Hour})
		if res.Fetched != 1 || res.New != 1 || !strings.Contains(strings.Join(res.Warnings, "\n"), "without --since") {
			t.Fatalf("--since with the checkpoint ahead: fetched %d new %d, warnings %q; want 1, 1 and how to move it back", res.Fetched, res.New, res.Warnings)
		}
	})

	// The relisting counts each event once, and says the skew once.
	t.Run("RelistCountsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, base.Add(-2*time.Minute))
		b.fake.addType("evt_1", "invoice.paid", base.Add(-time.Hour))
		b.fake.addType("evt_2", "invoice.paid", base.Add(-40*time.Minute))
		res := b.pass(t, PassOptions{})
		skews := strings.Count(strings.Join(res.Warnings, "\n"), "host's clock is")
		if res.Fetched != 2 || res.New != 2 || res.Known != 0 || skews != 1 {
			t.Fatalf("relisted pass: fetched %d new %d known %d, %d skew warnings; want 2, 2, 0, 1: %q", res.Fetched, res.New, res.Known, skews, res.Warnings)
		}
	})
}

// A host whose clock is behind the provider's by more than the overlap
// finds a checkpoint written by a host that was right later than its now.
// The provider's Date shows the checkpoint is not ahead, so the pass keeps
// it: listing from the lookback would wind it back by the lookback and
// relist three days on every pass until the clock was fixed.
func TestSlowHostKeepsTheCheckpoint(t *testing.T) {
	t.Parallel()
	const slow = 20 * time.Minute
	b := setupStripe(t, StripeOptions{})
	b.now = base.Add(-slow)
	b.fake.date = func() time.Time { return b.now.Add(slow) }
	written := base.Add(-2 * time.Minute)
	putCheckpoint(t, b, written)
	b.fake.addType("evt_1", "invoice.paid", base.Add(-time.Hour))
	res := b.pass(t, PassOptions{})
	if cp, _ := checkpoint(t, b.store, "stripe"); !cp.Equal(written) {
		t.Errorf("checkpoint %v, want it kept at %v", cp, written)
	}
	if want := res.To.Add(-DefaultOverlap); !res.From.Equal(want) || res.Fetched != 0 {
		t.Errorf("window from %v, fetched %d; want the last overlap, from %v, and nothing relisted", res.From, res.Fetched, want)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "this host runs slow") {
		t.Errorf("warnings %q: want the slow clock named", res.Warnings)
	}
}

// A fetch refused in the pass that finds the checkpoint ahead (here, by
// asking the provider about the last overlap) does not keep the pass from
// listing again from the lookback: an event between the two is taken.
func TestCheckpointAheadFoundBesideARefusedFetch(t *testing.T) {
	t.Parallel()
	b := setupGitHub(t, GitHubOptions{})
	b.now = base
	if err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("github"), Value: base.Add(time.Hour).Format(time.RFC3339Nano)}); err != nil {
		t.Fatal(err)
	}
	b.fake.add("gap", "push", base.Add(-30*time.Minute), 500)   // delivery 1
	b.fake.add("recent", "push", base.Add(-5*time.Minute), 500) // delivery 2, in the last overlap
	b.fake.refuseFetch("2", http.StatusNotFound)
	res, err := b.runner.Pass(context.Background(), PassOptions{})
	if !errors.Is(err, ErrRefusedForNow) {
		t.Fatalf("err = %v, want the refused fetch named", err)
	}
	// Delivery 2, refused by both runs, is listed once.
	if res.Fetched != 2 || res.New != 1 || res.Known != 0 {
		t.Errorf("fetched %d new %d known %d; want 2, 1, 0", res.Fetched, res.New, res.Known)
	}
	if _, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: "gap"}); err != nil {
		t.Fatalf("the event before the last overlap was not taken: %v\n%s", err, b.logsText())
	}
}

// A checkpoint later than this host's now is checked by listing the last
// overlap, whose events the pass takes; found ahead, it lists again from
// the lookback. Each event is counted once, in the result and on the
// Observer, whether the relisting finds the first run's events known or
// fails before it reaches them.
func TestRelistCountsEachEventOnce(t *testing.T) {
	t.Parallel()
	for _, relisting := range []string{"Listed", "Failed"} {
		t.Run(relisting, func(t *testing.T) {
			t.Parallel()
			b := setupStripe(t, StripeOptions{})
			b.now = base
			putCheckpoint(t, b, base.Add(time.Hour))
			obs := eventCounts{}
			b.runner.Observer = obs
			b.fake.addType("evt_old", "invoice.paid", base.Add(-time.Hour))
			b.fake.addType("evt_recent", "invoice.paid", base.Add(-5*time.Minute)) // in the last overlap
			want, wantObs := Result{Fetched: 2, New: 2}, eventCounts{OutcomeNew: 2}
			if relisting == "Failed" {
				b.fake.fail = func(n int, w http.ResponseWriter, _ *http.Request) bool {
					if n == 1 {
						return false // the first run's one page
					}
					w.WriteHeader(http.StatusBadRequest)
					fmt.Fprint(w, `{"error":{"message":"relisting refused"}}`)
					return true
				}
				want, wantObs = Result{Fetched: 1, New: 1}, eventCounts{OutcomeNew: 1}
			}
			res, err := b.runner.Pass(context.Background(), PassOptions{})
			if (err != nil) != (relisting == "Failed") || res == nil {
				t.Fatalf("res %v, err %v", res, err)
			}
			if res.Fetched != want.Fetched || res.New != want.New || res.Known != 0 {
				t.Errorf("fetched %d new %d known %d; want %d, %d, 0", res.Fetched, res.New, res.Known, want.Fetched, want.New)
			}
			if !maps.Equal(obs, wantObs) {
				t.Errorf("observed %v, want %v", obs, wantObs)
			}
		})
	}
}

// A pass that cannot be followed by a second keeps no list of what it
// takes once the provider's clock shows the checkpoint is not ahead, even
// within one listing (GitHub lists a window in one call: up to three days
// of deliveries); --since, never relisting, keeps none beside a checkpoint
// ahead either.
func TestPassKeepsNoListWithoutASecondRun(t *testing.T) {
	t.Parallel()
	for _, since := range []time.Duration{0, 2 * time.Hour} {
		b := newRunBundle(t)
		events := listed{}
		for i := range 30 {
			events[fmt.Sprintf("evt_%02d", i)] = &Event{Type: "t", Payload: []byte(`{}`)}
		}
		kept, peak := map[string]bool{}, 0
		b.start("dated", datedList{listed: events, date: base, peek: func() { peak = max(peak, len(kept)) }}, slog.LevelInfo)
		b.runner.Lookback = time.Hour
		checkpoint := base.Add(-5 * time.Minute)
		if since > 0 {
			checkpoint = base.Add(time.Hour) // ahead: --since says so, and lists once
		}
		if err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("dated"), Value: checkpoint.Format(time.RFC3339Nano)}); err != nil {
			t.Fatal(err)
		}
		res, _, err := b.runner.pass(context.Background(), PassOptions{Since: since}, false, kept)
		if err != nil || res.New != 30 || peak != 0 {
			t.Errorf("since %v: new %d, %v; at most %d ids kept, want 30 new, none kept", since, res.New, err, peak)
		}
	}
}

// datedList is listed behind an answer that gives the provider's clock
// (date); peek runs after each event the pass is given.
type datedList struct {
	listed
	date time.Time
	peek func()
}

func (d datedList) List(ctx context.Context, w Window, found func(*Candidate) error) error {
	observeDate(ctx, d.date)
	return d.listed.List(ctx, w, func(c *Candidate) error {
		err := found(c)
		d.peek()
		return err
	})
}

// --since with a checkpoint later than this host's now, and no answer that
// gives the provider's clock: the pass keeps the checkpoint and says how to
// move it back.
func TestSinceWithACheckpointAheadAndNoDate(t *testing.T) {
	t.Parallel()
	b := setupStripe(t, StripeOptions{})
	b.fake.date = func() time.Time { return time.Time{} }
	b.now = base
	putCheckpoint(t, b, base.Add(time.Hour))
	res := b.pass(t, PassOptions{Since: 2 * time.Hour})
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "run again without --since") {
		t.Errorf("warnings %q: want how to move the checkpoint back", res.Warnings)
	}
	if cp, _ := checkpoint(t, b.store, "stripe"); !cp.Equal(base.Add(time.Hour)) {
		t.Errorf("checkpoint %v, want it kept", cp)
	}
}

func putCheckpoint(t *testing.T, b *stripeBundle, at time.Time) {
	t.Helper()
	err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("stripe"), Value: at.Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
}
