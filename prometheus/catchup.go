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
// For each source whose loop runs here (LoopStarted),
// ferry_catchup_interval_seconds and ferry_catchup_last_ok_timestamp_seconds
// say how long it has gone without a pass that ended ok, whatever the
// interval.
type CatchupMetrics struct {
	sources  []string
	events   *prom.CounterVec
	passes   *prom.CounterVec
	interval *prom.GaugeVec
	lastOK   *prom.GaugeVec
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
			Help: "The interval of the source's catch-up loop on this instance; absent where it does not run.",
		}, []string{"source"}),
		lastOK: prom.NewGaugeVec(prom.GaugeOpts{
			Namespace: "ferry", Name: "catchup_last_ok_timestamp_seconds",
			Help: "When the source's last catch-up pass on this instance ended ok (Unix seconds), or its loop started if none has; only the lease holder runs passes, so take the max over instances.",
		}, []string{"source"}),
	}
	reg.MustRegister(m.events, m.passes, m.interval, m.lastOK)
	for _, s := range sources {
		m.events.WithLabelValues(s, catchup.OutcomeNew)
		m.events.WithLabelValues(s, catchup.OutcomeKnown)
		m.events.WithLabelValues(s, catchup.OutcomeSkipped)
		m.passes.WithLabelValues(s, catchup.PassOK)
		m.passes.WithLabelValues(s, catchup.PassFailed)
	}
	return m
}

// LoopStarted exports the source's loop interval, and its start as the
// last ok pass until one is.
func (m *CatchupMetrics) LoopStarted(source string, interval time.Duration) {
	m.interval.WithLabelValues(source).Set(interval.Seconds())
	m.lastOK.WithLabelValues(source).SetToCurrentTime()
}

// CatchupPass counts one pass of serve's loop, and dates an ok one.
func (m *CatchupMetrics) CatchupPass(source, outcome string) {
	m.passes.WithLabelValues(source, outcome).Inc()
	if outcome == catchup.PassOK {
		m.lastOK.WithLabelValues(source).SetToCurrentTime()
	}
}

// CatchupEvent counts one listed event.
func (m *CatchupMetrics) CatchupEvent(source, outcome string) {
	m.events.WithLabelValues(source, outcome).Inc()
}
