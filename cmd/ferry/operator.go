package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/prometheus"
)

// operator is serve's operator surface: metrics, alerts, and the admin
// listener's handler (the dashboard and /metrics).
type operator struct {
	cfg     *config.Config
	log     *slog.Logger
	metrics *prometheus.Metrics
	reg     *prom.Registry // /metrics serves it
	catchup *prometheus.CatchupMetrics
	stats   ferry.Store
	// admin serves admin.listen; nil when the dashboard and /metrics are
	// both off.
	admin http.Handler
	// pusher POSTs alerts to alerts.url; nil when it is not set.
	pusher *alertPusher
}

// watchReceiver exports r's bodies in flight on /metrics.
func (op *operator) watchReceiver(r *ferryhttp.Receiver) {
	op.reg.MustRegister(prometheus.NewReceiverGauge(r))
}

// newOperator builds the metrics and the admin handler. Nothing it builds is
// ever mounted on the public listener.
func newOperator(cfg *config.Config, st ferry.Store, log *slog.Logger) (*operator, error) {
	reg := prom.NewRegistry()
	op := &operator{cfg: cfg, log: log, metrics: prometheus.NewMetrics(reg, cfg.SourceNames()), reg: reg, stats: st}
	for _, s := range cfg.Sources {
		op.metrics.StartSecrets(s.Name, len(s.Secrets))
	}
	pusher, err := op.newPusher()
	if err != nil {
		return nil, err
	}
	op.pusher = pusher
	op.catchup = prometheus.NewCatchupMetrics(reg, cfg.CatchupSourceNames())
	for _, s := range cfg.Sources {
		if every := s.Catchup.LoopInterval(); every > 0 {
			op.catchup.SetInterval(s.Name, every)
		}
	}
	if !cfg.AdminServed() {
		return op, nil
	}
	if cfg.AdminCleartext() {
		log.Warn("ferry: the admin listener is reachable from other hosts and admin.public_url is not https: the session cookie is not Secure, and credentials travel in the clear unless TLS stands in front; put TLS in front and set admin.public_url to the https URL operators open", "listen", cfg.Admin.Listen)
	}
	opts := ferryhttp.AdminOptions{
		Token: cfg.Admin.Token, TokenName: cfg.Admin.TokenName, User: cfg.Admin.User, Password: cfg.Admin.Password,
		PublicURL: cfg.Admin.PublicURL, SessionTTL: cfg.Admin.SessionTTL.Duration, Logger: log,
	}
	if *cfg.Metrics.Enabled {
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			prometheus.NewStatsCollector(prometheus.StatsOptions{
				Store: st, Params: *cfg.StatsParams(0), Sources: cfg.SourceNames(), CacheTTL: cfg.Metrics.Cache.Duration,
				CatchupSources: cfg.CatchupSourceNames(),
			}),
		)
		opts.Metrics = prometheus.Handler(reg)
	}
	if *cfg.UI.Enabled {
		d, err := ferryhttp.NewDashboard(ferryhttp.DashboardOptions{Store: st, AtRiskAfter: cfg.AtRiskAfter(), Logger: log, Runnable: cfg.SourceNames(), Redaction: cfg.Redaction()})
		if err != nil {
			return nil, fmt.Errorf("%w: ui: %v", errConfig, err)
		}
		opts.Dashboard = d
	}
	admin, err := ferryhttp.NewAdmin(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: admin: %v", errConfig, err)
	}
	op.admin = admin
	return op, nil
}

// newPusher builds the alert pusher when alerts.url is set; nil otherwise.
func (op *operator) newPusher() (*alertPusher, error) {
	if op.cfg.Alerts.URL == "" {
		return nil, nil
	}
	return newAlertPusher(alertPusherOptions{
		Store: op.stats, URL: op.cfg.Alerts.URL, Sources: op.cfg.SourceNames(), Params: op.cfg.StatsParams(0),
		Interval: op.cfg.Alerts.Interval.Duration, Check: op.cfg.Alerts.CheckInterval.Duration,
		PublicURL: op.cfg.Admin.PublicURL, StoreTimeout: op.cfg.HTTP.StoreTimeout.Duration, Log: op.log,
	}), nil
}

// start runs the background parts until ctx is done: the alert watcher,
// and the alert pusher when alerts.url is set.
func (op *operator) start(ctx context.Context, bg *sync.WaitGroup) {
	w := newAlertWatcher(op.stats, op.cfg.StatsParams(0), op.log)
	bg.Go(func() { w.run(ctx, op.cfg.Alerts.CheckInterval.Duration) })
	if op.pusher != nil {
		bg.Go(func() { op.pusher.run(ctx, op.cfg.Alerts.CheckInterval.Duration) })
	}
}
