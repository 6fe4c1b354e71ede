package config

import (
	"fmt"
	"net"
	"time"

	"github.com/ferry-inbox/ferry"
)

// UI is the dashboard at /ui, served on http.listen.
type UI struct {
	// Enabled serves the dashboard. Defaults to true.
	Enabled *bool `toml:"enabled"`
	// Token, when set, is required as "Authorization: Bearer TOKEN" or
	// through the dashboard's login form. Write it as "${FERRY_UI_TOKEN}".
	Token string `toml:"token"`
	// User and Password, when set, are required as HTTP basic auth.
	User     string `toml:"user"`
	Password string `toml:"password"`
}

// Metrics is the Prometheus endpoint /metrics, served on http.listen.
type Metrics struct {
	// Enabled serves /metrics. Defaults to true.
	Enabled *bool `toml:"enabled"`
	// Cache is how long one read of the store's stats answers scrapes.
	// Defaults to 10s.
	Cache Duration `toml:"cache"`
}

// Alerts tunes the at-risk warnings.
type Alerts struct {
	// AtRiskMargin is how long before a source's replay window runs out an
	// unfinished event counts as at risk. Defaults to a sixth of each
	// source's replay window (12h for the default 72h).
	AtRiskMargin Duration `toml:"at_risk_margin"`
	// CheckInterval is how often serve looks for events newly at risk,
	// unknown or dead, and logs them. Defaults to 30s.
	CheckInterval Duration `toml:"check_interval"`
}

// Defaults of the operator surface.
const (
	DefaultMetricsCache       = 10 * time.Second
	DefaultAlertCheckInterval = 30 * time.Second
)

func (c *Config) applyOperatorDefaults() {
	t := true
	if c.UI.Enabled == nil {
		c.UI.Enabled = &t
	}
	if c.Metrics.Enabled == nil {
		c.Metrics.Enabled = &t
	}
	if c.Metrics.Cache.Duration == 0 {
		c.Metrics.Cache.Duration = DefaultMetricsCache
	}
	if c.Alerts.CheckInterval.Duration == 0 {
		c.Alerts.CheckInterval.Duration = DefaultAlertCheckInterval
	}
}

func (c *Config) validateOperator() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if (c.UI.User == "") != (c.UI.Password == "") {
		bad("ui.password", "ui.user and ui.password go together: set both (password as \"${FERRY_UI_PASSWORD}\"), or neither")
	}
	if err := c.CheckUIExposure(c.HTTP.Listen); err != nil {
		errs = append(errs, err)
	}
	if c.Metrics.Cache.Duration < 0 {
		bad("metrics.cache", "is %v: use a positive duration like \"10s\"", c.Metrics.Cache.Duration)
	}
	if c.Alerts.CheckInterval.Duration < time.Second {
		bad("alerts.check_interval", "is %v: use at least 1s (the default is %v)", c.Alerts.CheckInterval.Duration, DefaultAlertCheckInterval)
	}
	if m := c.Alerts.AtRiskMargin.Duration; m != 0 {
		for i, s := range c.Sources {
			if m < 0 || m >= s.ReplayWindow.Duration {
				bad("alerts.at_risk_margin", "%v must be positive and shorter than source[%d] (%s).replay_window %v: events would be at risk as soon as they arrive; use e.g. %v", m, i, s.Name, s.ReplayWindow.Duration, s.ReplayWindow.Duration/6)
			}
		}
	}
	return errs
}

// UIAuth reports whether the dashboard has credentials configured.
func (c *Config) UIAuth() bool { return c.UI.Token != "" || c.UI.User != "" }

// CheckUIExposure refuses a dashboard without credentials on an address
// other than loopback: replaying events is a write anyone on the network
// could make. serve calls it again after --listen overrides http.listen.
func (c *Config) CheckUIExposure(listen string) error {
	if !*c.UI.Enabled || c.UIAuth() {
		return nil
	}
	if IsLoopback(listen) {
		return nil
	}
	return fmt.Errorf("ui: the dashboard would listen on %s, which is not a loopback address, without credentials: set ui.token = \"${FERRY_UI_TOKEN}\" (or ui.user and ui.password), listen on 127.0.0.1, or set ui.enabled = false", listen)
}

// IsLoopback reports whether a host:port listens on loopback only. An empty
// host or 0.0.0.0 listens everywhere; a name other than localhost may
// resolve anywhere, so it is not loopback.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AtRiskAfter returns, per source, the age from first delivery past which an
// unfinished event is at risk: its replay window minus the margin.
func (c *Config) AtRiskAfter() map[string]time.Duration {
	out := make(map[string]time.Duration, len(c.Sources))
	for _, s := range c.Sources {
		margin := c.Alerts.AtRiskMargin.Duration
		if margin == 0 {
			margin = s.ReplayWindow.Duration / 6
		}
		out[s.Name] = s.ReplayWindow.Duration - margin
	}
	return out
}

// StatsParams returns the store stats parameters of this configuration.
func (c *Config) StatsParams(limit int) *ferry.EventStatsParams {
	return &ferry.EventStatsParams{AtRiskAfter: c.AtRiskAfter(), AtRiskLimit: limit}
}

// SourceNames lists the configured sources in file order.
func (c *Config) SourceNames() []string {
	out := make([]string, len(c.Sources))
	for i, s := range c.Sources {
		out[i] = s.Name
	}
	return out
}
