package prometheus_test

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry/catchup"
	"github.com/ferry-inbox/ferry/internal/testhttp"
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
	if strings.Contains(raw, "ferry_catchup_last_ok_timestamp_seconds") || strings.Contains(raw, "ferry_catchup_interval_seconds") {
		t.Errorf("a loop's gauges before any loop started:\n%s", raw)
	}

	// The loop's start counts as its last ok pass until one is; an ok
	// pass dates it.
	m.LoopStarted("stripe", 15*time.Minute)
	m.CatchupPass("github", catchup.PassOK)
	_, raw = testhttp.Get(t, srv.URL)
	if !strings.Contains(raw, `ferry_catchup_interval_seconds{source="stripe"} 900`) || strings.Contains(raw, `ferry_catchup_interval_seconds{source="github"}`) {
		t.Errorf("interval gauge: want stripe's loop alone:\n%s", raw)
	}
	for _, source := range []string{"stripe", "github"} {
		at := lastOK(t, raw, source)
		if now := float64(time.Now().Unix()); at < now-600 || at > now+1 {
			t.Errorf("%s: ferry_catchup_last_ok_timestamp_seconds %v, want about now (%v)", source, at, now)
		}
	}
}

// lastOK reads source's ferry_catchup_last_ok_timestamp_seconds from a
// scrape; 0 when it is absent.
func lastOK(t *testing.T, raw, source string) float64 {
	t.Helper()
	_, rest, ok := strings.Cut(raw, `ferry_catchup_last_ok_timestamp_seconds{source="`+source+`"} `)
	if !ok {
		return 0
	}
	line, _, _ := strings.Cut(rest, "\n")
	v, err := strconv.ParseFloat(line, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
