package prometheus

import (
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry/catchup"
)

var _ catchup.Observer = (*CatchupMetrics)(nil)

// CatchupMetrics counts what catch-up passes found:
// ferry_catchup_events_total{source, outcome="new"|"known"|"skipped"}. A
// steady stream of "new" means the provider fails to deliver: look at the
// endpoint's configuration on its side. "skipped" is an event the provider
// lists that catch-up cannot fetch or store (larger than max_body, an id
// or type no store keeps, one the provider cannot return): only a warning
// in the log says why. And how serve's passes ended:
// ferry_catchup_passes_total{source, outcome="ok"|"failed"}; failures with
// no ok mean catch-up is not running (a revoked key, an API that refuses).
// And ferry_catchup_interval_seconds{source}, the loop's interval
// (SetInterval), which FerryCatchupFailing compares with the checkpoint's
// age (StatsCollector).
type CatchupMetrics struct {
	sources  []string
	events   *prom.CounterVec
	passes   *prom.CounterVec
	interval *prom.GaugeVec
}

// NewCatchupMetrics registers the counter on reg, every source in sources
// starting at zero.
func NewCatchupMetrics(reg prom.Registerer, sources []string) *CatchupMetrics {
	m := &CatchupMetrics{
		sources: sources,
		events: prom.NewCounterVec(prom.CounterOpts{
			Namespace: "ferry", Name: "catchup_events_total",
			Help: "Events listed by catch-up passes, by source and outcome: new (fetched because the provider never delivered it), known, or skipped (it cannot be fetched or stored; logged).",
		}, []string{"source", "outcome"}),
		passes: prom.NewCounterVec(prom.CounterOpts{
			Namespace: "ferry", Name: "catchup_passes_total",
			Help: "Catch-up passes run by serve, by source and outcome: ok or failed (retried the next interval).",
		}, []string{"source", "outcome"}),
		interval: prom.NewGaugeVec(prom.GaugeOpts{
			Namespace: "ferry", Name: "catchup_interval_seconds",
			Help: "How often serve runs a catch-up pass of the source, by the config; absent for a source without a loop.",
		}, []string{"source"}),
	}
	reg.MustRegister(m.events, m.passes, m.interval)
	for _, s := range sources {
		m.events.WithLabelValues(s, catchup.OutcomeNew)
		m.events.WithLabelValues(s, catchup.OutcomeKnown)
		m.events.WithLabelValues(s, catchup.OutcomeSkipped)
		m.passes.WithLabelValues(s, catchup.PassOK)
		m.passes.WithLabelValues(s, catchup.PassFailed)
	}
	return m
}

// SetInterval exports the interval of the source's catch-up loop. Every
// instance exports it from the config, whether or not it holds the loop's
// lease, so an alert still sees it when no instance runs the loop.
func (m *CatchupMetrics) SetInterval(source string, interval time.Duration) {
	m.interval.WithLabelValues(source).Set(interval.Seconds())
}

// CatchupPass counts one pass of serve's loop.
func (m *CatchupMetrics) CatchupPass(source, outcome string) {
	m.passes.WithLabelValues(source, outcome).Inc()
}

// CatchupEvent counts one listed event.
func (m *CatchupMetrics) CatchupEvent(source, outcome string) {
	m.events.WithLabelValues(source, outcome).Inc()
}
