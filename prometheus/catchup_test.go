package prometheus_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/catchup"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/prometheus"
)

func TestCatchupMetrics(t *testing.T) {
	t.Parallel()
	reg := prom.NewRegistry()
	m := prometheus.NewCatchupMetrics(reg, []string{"stripe", "github"})
	for range 3 {
		m.CatchupEvent("stripe", catchup.OutcomeNew)
	}
	m.CatchupEvent("stripe", catchup.OutcomeKnown)
	m.CatchupEvent("stripe", catchup.OutcomeSkipped)
	m.CatchupPass("stripe", catchup.PassFailed)
	m.CatchupPass("stripe", catchup.PassFailed)

	srv := httptest.NewServer(prometheus.Handler(reg))
	defer srv.Close()
	_, raw := testhttp.Get(t, srv.URL)
	for _, want := range []string{
		`ferry_catchup_events_total{outcome="new",source="stripe"} 3`,
		`ferry_catchup_events_total{outcome="known",source="stripe"} 1`,
		`ferry_catchup_events_total{outcome="skipped",source="stripe"} 1`,
		`ferry_catchup_events_total{outcome="new",source="github"} 0`, // present before the first pass
		`ferry_catchup_events_total{outcome="skipped",source="github"} 0`,
		`ferry_catchup_passes_total{outcome="failed",source="stripe"} 2`,
		`ferry_catchup_passes_total{outcome="ok",source="stripe"} 0`,
	} {
		if !strings.Contains(raw, want) {
			t.Errorf("metrics lack %s:\n%s", want, raw)
		}
	}
	if strings.Contains(raw, "ferry_catchup_interval_seconds") {
		t.Errorf("an interval before any was set:\n%s", raw)
	}
	m.SetInterval("stripe", 15*time.Minute)
	_, raw = testhttp.Get(t, srv.URL)
	if !strings.Contains(raw, `ferry_catchup_interval_seconds{source="stripe"} 900`) || strings.Contains(raw, `ferry_catchup_interval_seconds{source="github"}`) {
		t.Errorf("interval gauge: want stripe's loop alone:\n%s", raw)
	}
}

// The checkpoint's age is read from the store, which every instance
// shares: it grows while no pass moves the checkpoint, whatever restarts,
// and a source with no checkpoint yet has none.
func TestCatchupCheckpointAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, clock := teststore.SQLiteOnClock(t)
	at := clock.Now().Add(-17 * time.Minute)
	if err := store.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: catchup.CheckpointName("stripe"), Value: at.Format(time.RFC3339Nano)}); err != nil {
		t.Fatal(err)
	}
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, Sources: []string{"stripe", "github"}, CatchupSources: []string{"stripe", "github"}}))
	srv := httptest.NewServer(prometheus.Handler(reg))
	defer srv.Close()
	_, raw := testhttp.Get(t, srv.URL)
	if !strings.Contains(raw, `ferry_catchup_checkpoint_age_seconds{source="stripe"} 1020`) || strings.Contains(raw, `ferry_catchup_checkpoint_age_seconds{source="github"}`) {
		t.Errorf("want stripe's checkpoint 1020 s old and none for github:\n%s", raw)
	}
}

type unreadableCheckpoint struct{ ferry.Store }

func (unreadableCheckpoint) CheckpointGet(context.Context, *ferry.CheckpointGetParams) (*ferry.Checkpoint, error) {
	return nil, context.DeadlineExceeded
}

// A checkpoint that cannot be read leaves its gauge out, and nothing else:
// the store's gauges stay, and ferry_stats_up says 1, so no store-down
// alert fires for one slow read.
func TestCatchupCheckpointUnreadable(t *testing.T) {
	t.Parallel()
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{
		Store: unreadableCheckpoint{teststore.SQLite(t, nil)}, Sources: []string{"stripe"}, CatchupSources: []string{"stripe"},
	}))
	srv := httptest.NewServer(prometheus.Handler(reg))
	defer srv.Close()
	_, raw := testhttp.Get(t, srv.URL)
	if !strings.Contains(raw, "ferry_stats_up 1") || !strings.Contains(raw, `ferry_events{source="stripe",state="pending"} 0`) || strings.Contains(raw, "ferry_catchup_checkpoint_age_seconds") {
		t.Errorf("an unreadable checkpoint: want stats up, the store's gauges, and no age:\n%s", raw)
	}
}
