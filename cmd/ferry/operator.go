package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/prometheus"
)

// operator is serve's operator surface: metrics, alerts and the dashboard.
type operator struct {
	cfg     *config.Config
	log     *slog.Logger
	metrics *prometheus.Metrics
	catchup *prometheus.CatchupMetrics
	stats   ferry.StatsStore
}

// newOperator builds the metrics and mounts /metrics and /ui/ on mux. listen is the
// address the server binds, after --listen.
func newOperator(cfg *config.Config, st ferry.Store, mux *http.ServeMux, listen string, log *slog.Logger) (*operator, error) {
	stats, ok := st.(ferry.StatsStore)
	if !ok {
		return nil, fmt.Errorf("store %T cannot report stats", st)
	}
	if err := cfg.CheckUIExposure(listen); err != nil {
		return nil, fmt.Errorf("%w: %v", errConfig, err)
	}
	reg := prom.NewRegistry()
	op := &operator{cfg: cfg, log: log, metrics: prometheus.NewMetrics(reg, cfg.SourceNames()), stats: stats}
	op.catchup = prometheus.NewCatchupMetrics(reg, cfg.CatchupSourceNames())
	if *cfg.Metrics.Enabled {
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			prometheus.NewStatsCollector(prometheus.StatsOptions{
				Store: stats, Params: *cfg.StatsParams(0), Sources: cfg.SourceNames(), CacheTTL: cfg.Metrics.Cache.Duration,
			}),
		)
		mux.Handle("GET /metrics", prometheus.Handler(reg))
	}
	if *cfg.UI.Enabled {
		d, err := ferryhttp.NewDashboard(ferryhttp.DashboardOptions{
			Store: stats, AtRiskAfter: cfg.AtRiskAfter(), Addr: listen,
			Token: cfg.UI.Token, User: cfg.UI.User, Password: cfg.UI.Password, Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: ui: %v", errConfig, err)
		}
		d.Register(mux)
	}
	return op, nil
}

// start runs the background parts until ctx is done: the alert watcher.
func (op *operator) start(ctx context.Context) {
	w := newAlertWatcher(op.stats, op.cfg.StatsParams(0), op.log)
	go w.run(ctx, op.cfg.Alerts.CheckInterval.Duration)
}
