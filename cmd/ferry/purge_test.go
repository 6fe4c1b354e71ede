package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// doneEvent receives, claims and completes source's eventID in st.
func doneEvent(t *testing.T, st ferry.Store, source, eventID string) int64 {
	t.Helper()
	ctx := context.Background()
	res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute, Sources: []string{source}})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	if err := st.EventComplete(ctx, &ferry.EventCompleteParams{Lease: claims[0].Event.Lease()}); err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// retention144h is a Stripe source keeping done events 144 h.
var retention144h = config.Source{Name: "stripe", ReplayWindow: config.Duration{Duration: 72 * time.Hour}, Retention: config.Duration{Duration: 144 * time.Hour}}

func TestPurgerKeepsRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clock := teststore.SQLiteOnClock(t)
	old := doneEvent(t, st, "stripe", "evt_old")
	clock.Advance(100 * time.Hour)
	young := doneEvent(t, st, "stripe", "evt_young")
	clock.Advance(50 * time.Hour) // old: 150 h since done, young: 50 h

	p := &purger{store: st, sources: []config.Source{retention144h}, owner: "test", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	p.purgeAll(ctx)

	if _, err := st.EventGet(ctx, &ferry.EventGetParams{ID: old}); !errors.Is(err, ferry.ErrNotFound) {
		t.Errorf("event done 150 h ago with 144 h retention: err = %v, want purged", err)
	}
	if _, err := st.EventGet(ctx, &ferry.EventGetParams{ID: young}); err != nil {
		t.Errorf("event done 50 h ago was purged: %v", err)
	}
}

// ArchiveMaintain enforces only the longest retention: a source that
// keeps done events less long is purged on its own.
func TestPurgerKeepsEachSourcesRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clock := teststore.SQLiteOnClock(t)
	kept := doneEvent(t, st, "stripe", "evt_kept")
	gone := doneEvent(t, st, "github", "gh_gone")
	clock.Advance(100 * time.Hour) // past github's 72 h, within stripe's 144 h

	github := config.Source{Name: "github", ReplayWindow: config.Duration{Duration: 72 * time.Hour}, Retention: config.Duration{Duration: 72 * time.Hour}}
	p := &purger{store: st, sources: []config.Source{retention144h, github}, owner: "test", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	p.purgeAll(ctx)

	if _, err := st.EventGet(ctx, &ferry.EventGetParams{ID: gone}); !errors.Is(err, ferry.ErrNotFound) {
		t.Errorf("github event done 100 h ago with 72 h retention: err = %v, want purged", err)
	}
	if _, err := st.EventGet(ctx, &ferry.EventGetParams{ID: kept}); err != nil {
		t.Errorf("stripe event done 100 h ago with 144 h retention was purged: %v", err)
	}
}

// The purger keeps dedupe keys for the longest replay window, not only the
// longest retention: config refuses a retention shorter than its window,
// but the purger passes the window to the store and leaves the rule there.
func TestPurgerKeepsKeysForTheReplayWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clock := teststore.SQLiteOnClock(t)
	doneEvent(t, st, "stripe", "evt_old")
	clock.Advance(120 * time.Hour)

	week := config.Source{Name: "stripe", ReplayWindow: config.Duration{Duration: 168 * time.Hour}, Retention: config.Duration{Duration: 100 * time.Hour}}
	p := &purger{store: st, sources: []config.Source{week}, owner: "test", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	p.purgeAll(ctx)

	res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_old", Payload: []byte("{}")})
	if err != nil || res.Outcome != ferry.ReceiveDuplicate {
		t.Fatalf("redelivery 120 h on, inside a 168 h replay window: %+v, %v; want a duplicate", res, err)
	}
}

// On a fresh PostgreSQL store, serve maintains the archive (a week of
// partitions created) before it takes a delivery or a claim: that DDL beside
// traffic held completions off. On a machine so busy that the pass outlasts
// its bound, serve says so before serving, and that is the pass too.
func TestServeMaintainsTheArchiveBeforeServing(t *testing.T) {
	t.Parallel()
	_, appSrv := newDownstream(t, func(int, *http.Request) int { return http.StatusOK })
	p := startServe(t, writeConfig(t, pgtest.SchemaURL(t), appSrv.URL, ""))
	log := p.log()
	maintained := strings.Index(log, `"msg":"ferry: archive maintained"`)
	if cut := strings.Index(log, `"msg":"ferry: archive maintenance not done before serving`); cut >= 0 && (maintained < 0 || cut < maintained) {
		maintained = cut
	}
	serving := strings.Index(log, `"msg":"ferry: serving"`)
	if maintained < 0 || maintained > serving {
		t.Fatalf("the archive maintained line (at %d) does not come before the serving line (at %d):\n%s", maintained, serving, log)
	}
}

// A first pass cut short by its bound (a long SQLite purge) goes on in the
// background at once, not an interval later.
func TestPurgerCutFirstPassGoesOnAtOnce(t *testing.T) {
	t.Parallel()
	st, clock := teststore.SQLiteOnClock(t)
	old := doneEvent(t, st, "stripe", "evt_old")
	clock.Advance(150 * time.Hour)

	ctx, cancel := context.WithCancel(context.Background())
	p := &purger{store: st, sources: []config.Source{retention144h}, owner: "test", firstPass: time.Nanosecond,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	p.start(ctx, &bg, time.Hour)
	waitFor(t, 30*time.Second, "the purge to go on after the cut first pass", func() bool {
		_, err := st.EventGet(ctx, &ferry.EventGetParams{ID: old})
		return errors.Is(err, ferry.ErrNotFound)
	})
}
