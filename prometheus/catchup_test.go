package prometheus_test

import (
	"net/http/httptest"
	"strings"
	"testing"

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
}
