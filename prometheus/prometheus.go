// Package prometheus exports Ferry's metrics to Prometheus, on a registry the
// caller passes (never the global one):
//
//	reg := prom.NewRegistry()
//	m := prometheus.NewMetrics(reg, sources)
//	client, err := ferry.NewClient(&ferry.Config{Observer: m, ...})
//	receiver, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{Observer: m, ...})
//	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, ...}))
//
// Metrics counts what this process did (deliveries, attempts); the
// StatsCollector reads what the store holds (events by state, ages, events
// at risk), so its gauges agree across every instance sharing a store.
package prometheus

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
)

var (
	_ ferry.Observer            = (*Metrics)(nil)
	_ ferryhttp.ReceiveObserver = (*Metrics)(nil)
	_ ferryhttp.SecretObserver  = (*Metrics)(nil)
)

// OtherSource is the source label of deliveries to a source that is not
// configured, so a scanner probing /webhooks/<random> cannot grow the
// number of series without bound.
const OtherSource = "_other"

// Metrics counts deliveries and attempts. It implements ferry.Observer and
// ferryhttp.ReceiveObserver; pass it to both.
type Metrics struct {
	sources []string

	received        *prom.CounterVec
	verified        *prom.CounterVec
	receiveDuration *prom.HistogramVec
	claimed         *prom.CounterVec
	completed       *prom.CounterVec
	failed          *prom.CounterVec
	dead            *prom.CounterVec
	leaseLost       *prom.CounterVec
	released        *prom.CounterVec
	reclaimed       *prom.CounterVec
	handlerDuration *prom.HistogramVec
}

// NewMetrics registers Ferry's counters on reg. sources are the configured
// source names; any other name is counted as OtherSource.
func NewMetrics(reg prom.Registerer, sources []string) *Metrics {
	counter := func(name, help string, labels ...string) *prom.CounterVec {
		return prom.NewCounterVec(prom.CounterOpts{Namespace: "ferry", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		sources: slices.Clone(sources),
		received: counter("received_total",
			"Deliveries answered, by source and outcome (accepted, duplicate, conflict, replay, rejected, unavailable) and the reason of a rejection.",
			"source", "outcome", "reason"),
		verified: counter("verified_total",
			"Deliveries whose signature checked out, by source and the position in the source's secrets of the one that verified it (0 the first). While rotating, the old secret's count stops rising once the sender signs only with the new one.",
			"source", "secret"),
		receiveDuration: prom.NewHistogramVec(prom.HistogramOpts{
			Namespace: "ferry", Name: "receive_duration_seconds",
			Help:    "Time from request to reply, durable receipt included.",
			Buckets: prom.DefBuckets,
		}, []string{"source"}),
		claimed:   counter("claimed_total", "Attempts claimed, counted when the attempt ends.", "source"),
		completed: counter("completed_total", "Attempts that completed their event.", "source"),
		failed:    counter("failed_total", "Attempts that failed and scheduled a retry.", "source"),
		dead:      counter("dead_total", "Attempts that failed and sent their event to dead.", "source"),
		leaseLost: counter("lease_lost_total", "Attempts whose lease was lost before their verdict was recorded.", "source"),
		released:  counter("released_total", "Attempts given back unworked at shutdown.", "source"),
		reclaimed: counter("reclaimed_total", "Attempts on an event taken back from a worker whose lease had expired.", "source"),
		handlerDuration: prom.NewHistogramVec(prom.HistogramOpts{
			Namespace: "ferry", Name: "handler_duration_seconds",
			Help:    "Handler run time per attempt, by source and outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"source", "outcome"}),
	}
	reg.MustRegister(m.received, m.verified, m.receiveDuration, m.claimed, m.completed, m.failed, m.dead,
		m.leaseLost, m.released, m.reclaimed, m.handlerDuration)
	// Start every configured source at zero, so rate() and absent-series
	// alerts work before the first event.
	for _, s := range m.sources {
		for _, c := range []*prom.CounterVec{m.claimed, m.completed, m.failed, m.dead, m.leaseLost, m.released, m.reclaimed} {
			c.WithLabelValues(s)
		}
		m.verified.WithLabelValues(s, "0")
		for _, o := range []string{ferryhttp.OutcomeAccepted, ferryhttp.OutcomeDuplicate, ferryhttp.OutcomeConflict, ferryhttp.OutcomeReplay} {
			m.received.WithLabelValues(s, o, "")
		}
		// The outcomes docs/alerts.yml watches: without a zero before it,
		// rate() cannot see a process's first rejection or 503.
		for _, r := range []string{ferryhttp.ReasonBadSignature, ferryhttp.ReasonStaleTimestamp} {
			m.received.WithLabelValues(s, ferryhttp.OutcomeRejected, r)
		}
		for _, r := range []string{ferryhttp.ReasonStoreUnavailable, ferryhttp.ReasonStoreTimeout, ferryhttp.ReasonMemoryBudget} {
			m.received.WithLabelValues(s, ferryhttp.OutcomeUnavailable, r)
		}
	}
	return m
}

// NewReceiverGauge returns ferry_receiver_in_flight_bytes, the body bytes
// r holds now (ferryhttp.Receiver.InFlightBytes): near its
// MaxInFlightBytes, deliveries are answered 503 "memory_budget".
func NewReceiverGauge(r *ferryhttp.Receiver) prom.Collector {
	return prom.NewGaugeFunc(prom.GaugeOpts{
		Namespace: "ferry", Name: "receiver_in_flight_bytes",
		Help: "Body bytes the receiver holds now, arrived and not yet stored; bounded by http.max_in_flight.",
	}, func() float64 { return float64(r.InFlightBytes()) })
}

func (m *Metrics) source(s string) string {
	if slices.Contains(m.sources, s) {
		return s
	}
	return OtherSource
}

// ObserveReceive counts one answered delivery.
func (m *Metrics) ObserveReceive(source, outcome, reason string, latency time.Duration) {
	source = m.source(source)
	m.received.WithLabelValues(source, outcome, reason).Inc()
	m.receiveDuration.WithLabelValues(source).Observe(latency.Seconds())
}

// StartSecrets starts source's ferry_verified_total at zero for each of its
// n secrets (NewMetrics starts only the first's), so that increase() sees
// the first delivery the old secret verifies while one is rotated: without
// a zero before it, a source that gets one such delivery a day shows none.
func (m *Metrics) StartSecrets(source string, n int) {
	if !slices.Contains(m.sources, source) {
		return // counted as OtherSource, which has no secrets of its own
	}
	for i := range n {
		m.verified.WithLabelValues(m.source(source), strconv.Itoa(i))
	}
}

// ObserveSecret counts one delivery verified by source's secret at the
// given position.
func (m *Metrics) ObserveSecret(source string, secret int) {
	m.verified.WithLabelValues(m.source(source), strconv.Itoa(max(secret, 0))).Inc()
}

// AttemptFinished counts one attempt by how it ended.
func (m *Metrics) AttemptFinished(source string, outcome ferry.Outcome, reclaimed bool, handlerTime time.Duration) {
	source = m.source(source)
	m.claimed.WithLabelValues(source).Inc()
	if reclaimed {
		m.reclaimed.WithLabelValues(source).Inc()
	}
	switch outcome {
	case ferry.OutcomeDone:
		m.completed.WithLabelValues(source).Inc()
	case ferry.OutcomeFailed:
		m.failed.WithLabelValues(source).Inc()
	case ferry.OutcomeDead:
		m.dead.WithLabelValues(source).Inc()
	case ferry.OutcomeLeaseExpired:
		m.leaseLost.WithLabelValues(source).Inc()
	case ferry.OutcomeReleased:
		m.released.WithLabelValues(source).Inc()
	}
	m.handlerDuration.WithLabelValues(source, string(outcome)).Observe(handlerTime.Seconds())
}

// Handler serves the registry in Prometheus's text format, for /metrics. A
// collector that fails does not fail the scrape: the rest is still served.
func Handler(g prom.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
