package catchup

import (
	"context"
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

	// Once a pass has seen the provider's clock, the next one takes now by
	// it before any answer: a checkpoint written ahead since then starts
	// its window at the lookback, by the provider's clock, with no listing
	// from the checkpoint first.
	t.Run("LaterPassesTakeNowByTheProvider", func(t *testing.T) {
		t.Parallel()
		b := setup(t, base.Add(-behind-DefaultSettle))
		b.pass(t, PassOptions{})
		b.now = base.Add(DefaultInterval)
		putCheckpoint(t, b, b.now.Add(-DefaultSettle)) // an older build's, on this host
		res := b.pass(t, PassOptions{})
		providerNow := b.now.Add(-behind)
		if want := providerNow.Add(-DefaultLookback); !res.From.Equal(want) {
			t.Fatalf("window from %v, want the lookback from the provider's now, %v", res.From, want)
		}
		if strings.Contains(strings.Join(res.Warnings, "\n"), "listing again") || !strings.Contains(b.logsText(), "checkpoint later than now") {
			t.Fatalf("warnings %q: want the checkpoint dropped before the first answer:\n%s", res.Warnings, b.logsText())
		}
	})
}

func putCheckpoint(t *testing.T, b *stripeBundle, at time.Time) {
	t.Helper()
	err := b.store.CheckpointPut(context.Background(), &ferry.CheckpointPutParams{Name: CheckpointName("stripe"), Value: at.Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
}
