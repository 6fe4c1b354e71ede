package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/prometheus"
)

// Admin is the operators' listener: the dashboard (/ui), its actions and
// /metrics. It is apart from http.listen by construction, so nothing a
// provider can reach serves an admin path.
type Admin struct {
	// Listen is host:port. Defaults to 127.0.0.1:8081. Any address other
	// than loopback needs Token or User and Password.
	Listen string `toml:"listen"`
	// Token, when set, is accepted as "Authorization: Bearer TOKEN" and on
	// the login form. Write it as "${FERRY_ADMIN_TOKEN}".
	Token string `toml:"token"`
	// TokenName is who the log and the action ledger say acted with Token.
	// Defaults to "token".
	TokenName string `toml:"token_name"`
	// User and Password, when set, are accepted as HTTP basic auth and on
	// the login form; User names the actor.
	User     string `toml:"user"`
	Password string `toml:"password"`
	// PublicURL is the URL operators' browsers open the admin listener at
	// (through a TLS-terminating proxy, say). https makes the session
	// cookie Secure. Optional.
	PublicURL string `toml:"public_url"`
	// SessionTTL is how long a dashboard login lasts. Defaults to 12h.
	SessionTTL Duration `toml:"session_ttl"`
}

// UI is the dashboard at /ui, served on admin.listen.
type UI struct {
	// Enabled serves the dashboard. Defaults to true.
	Enabled *bool `toml:"enabled"`
	// Token, User and Password moved to [admin]; set here they stop the
	// start with a line saying so.
	Token    string `toml:"token"`
	User     string `toml:"user"`
	Password string `toml:"password"`
}

// Metrics is the Prometheus endpoint /metrics, served on admin.listen.
type Metrics struct {
	// Enabled serves /metrics. Defaults to true.
	Enabled *bool `toml:"enabled"`
	// Cache is how long one read of the store's stats answers scrapes.
	// Defaults to 10s.
	Cache Duration `toml:"cache"`
}

// Alerts tunes the warnings serve logs and, with URL, pushes.
type Alerts struct {
	// URL receives a JSON POST (Slack-compatible: a "text" field, plus
	// kind, source, event ids, counts and a dashboard link) for events
	// newly at risk, dead, unknown, conflicting or suspected replays. One
	// instance of a cluster sends (the store's lease "alerts"). It is a
	// secret (a Slack webhook URL is): write it as "${FERRY_ALERTS_URL}";
	// it never reaches a log line. Optional; nothing is pushed when empty.
	URL string `toml:"url"`
	// Interval is the least time between two messages of one kind about one
	// source; what happens meanwhile is rolled up into the next. Defaults
	// to 10m.
	Interval Duration `toml:"interval"`
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
	DefaultAdminListen        = "127.0.0.1:8081"
	DefaultAdminTokenName     = ferryhttp.DefaultTokenName
	DefaultSessionTTL         = ferryhttp.DefaultSessionTTL
	DefaultMetricsCache       = prometheus.DefaultCacheTTL
	DefaultAlertCheckInterval = 30 * time.Second
	DefaultAlertInterval      = 10 * time.Minute
)

func (c *Config) applyOperatorDefaults() {
	t := true
	if c.Admin.Listen == "" {
		c.Admin.Listen = DefaultAdminListen
	}
	if c.Admin.TokenName == "" {
		c.Admin.TokenName = DefaultAdminTokenName
	}
	if c.Admin.SessionTTL.Duration == 0 {
		c.Admin.SessionTTL.Duration = DefaultSessionTTL
	}
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
	if c.Alerts.Interval.Duration == 0 {
		c.Alerts.Interval.Duration = DefaultAlertInterval
	}
}

func (c *Config) validateOperator() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	for _, moved := range []struct{ name, value string }{{"token", c.UI.Token}, {"user", c.UI.User}, {"password", c.UI.Password}} {
		if moved.value != "" {
			bad("ui."+moved.name, "moved to [admin] (the dashboard has a listener of its own): write it as admin.%s", moved.name)
		}
	}
	errs = append(errs, c.validateAdmin()...)
	if c.Metrics.Cache.Duration < 0 {
		bad("metrics.cache", "is %v: use a positive duration like \"10s\"", c.Metrics.Cache.Duration)
	}
	if c.Alerts.CheckInterval.Duration < time.Second {
		bad("alerts.check_interval", "is %v: use at least 1s (the default is %v)", c.Alerts.CheckInterval.Duration, DefaultAlertCheckInterval)
	}
	if c.Alerts.URL != "" {
		// The URL is never echoed: a Slack webhook URL is a secret.
		u, err := url.Parse(c.Alerts.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("alerts.url", "is not an http(s) URL (not shown: it may hold a secret): write it like \"https://hooks.slack.com/services/...\", from the environment as \"${FERRY_ALERTS_URL}\"")
		}
	}
	if c.Alerts.Interval.Duration < 0 {
		bad("alerts.interval", "is %v: use a positive duration like \"10m\" (the default), the least time between two messages of one kind about one source", c.Alerts.Interval.Duration)
	}
	if m := c.Alerts.AtRiskMargin.Duration; m < 0 {
		bad("alerts.at_risk_margin", "is %v: use a positive duration, or leave it out for a sixth of each source's replay_window", m)
	} else if m > 0 {
		for i, s := range c.Sources {
			if s.ReplayWindow.Duration > 0 && m >= s.ReplayWindow.Duration { // a negative window is reported as such
				bad("alerts.at_risk_margin", "%v must be shorter than source[%d] (%s).replay_window %v: events would be at risk as soon as they arrive; use e.g. %v", m, i, s.Name, s.ReplayWindow.Duration, defaultAtRiskMargin(s.ReplayWindow.Duration))
			}
		}
	}
	return errs
}

func (c *Config) validateAdmin() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	a := c.Admin
	if (a.User == "") != (a.Password == "") {
		bad("admin.password", "admin.user and admin.password go together: set both (password as \"${FERRY_ADMIN_PASSWORD}\"), or neither")
	}
	if strings.Contains(a.User, ":") {
		bad("admin.user", "%q holds a colon: basic auth ends the user at the first colon (RFC 7617), so scrapes and scripts would be refused; use a user without one", a.User)
	}
	if err := checkListen(a.Listen); err != nil {
		bad("admin.listen", "%q %v: write it like %q", a.Listen, err, DefaultAdminListen)
	} else if listensOverlap(a.Listen, c.HTTP.Listen) {
		// The fix changes what was written: a flag, or either key when
		// the default admin address is itself the one taken.
		httpListen, fix := c.HTTP.Listen, "use "+DefaultAdminListen
		switch {
		case c.HTTP.listenFlag != "":
			httpListen += ", from " + c.HTTP.listenFlag
			fix = "give " + c.HTTP.listenFlag + " or admin.listen another port"
		case listensOverlap(DefaultAdminListen, c.HTTP.Listen):
			fix = "give http.listen or admin.listen another port"
		}
		bad("admin.listen", "%s is also http.listen (%s): both take the same port on a shared address; the admin surface needs a listener of its own; %s", a.Listen, httpListen, fix)
	} else if c.adminListenExposed() && !c.AdminAuth() {
		bad("admin.listen", "%s is not a loopback address and the admin listener has no credentials: anyone who reaches it could read payloads and replay events. Set admin.token = \"${FERRY_ADMIN_TOKEN}\" (or admin.user and admin.password), or listen on %s", a.Listen, loopbackOf(a.Listen))
	}
	if _, ok := adminURL(a.PublicURL); a.PublicURL != "" && !ok {
		bad("admin.public_url", "%s", notHTTPURL(a.PublicURL, "is not an http(s) URL", `write it like "https://ferry-admin.example.com"`))
	} else if c.adminURLExposed() && !c.AdminAuth() {
		bad("admin.public_url", "%s is not on this host and the admin listener has no credentials: anyone who reaches it there could read payloads and replay events. Set admin.token = \"${FERRY_ADMIN_TOKEN}\" (or admin.user and admin.password), or remove admin.public_url", RedactURL(a.PublicURL))
	}
	exposed := c.AdminExposed()
	// Anyone who reaches the listener may guess as fast as it answers: a
	// credential that short is found.
	for _, s := range []struct{ key, secret string }{{"admin.token", a.Token}, {"admin.password", a.Password}} {
		if exposed && s.secret != "" && utf8.RuneCountInString(s.secret) < MinAdminSecret {
			bad(s.key, "is shorter than %d characters and the admin listener is reachable from other hosts: use a longer one (openssl rand -hex 16 prints 32 characters)", MinAdminSecret)
		}
	}
	if a.SessionTTL.Duration < time.Minute {
		bad("admin.session_ttl", "is %v: use at least 1m (the default is %v)", a.SessionTTL.Duration, DefaultSessionTTL)
	}
	return errs
}

// AdminServed reports whether serve opens the admin listener: the dashboard
// or /metrics is on.
func (c *Config) AdminServed() bool { return *c.UI.Enabled || *c.Metrics.Enabled }

// AdminAuth reports whether the admin listener has credentials configured.
func (c *Config) AdminAuth() bool { return c.Admin.Token != "" || c.Admin.User != "" }

// AdminExposed reports whether the admin listener is reachable from other
// hosts: it is served and listens off loopback, or admin.public_url names
// another host.
func (c *Config) AdminExposed() bool { return c.adminListenExposed() || c.adminURLExposed() }

// AdminCleartext reports whether the admin listener is exposed with no https
// admin.public_url: its session cookie is not Secure, and credentials travel
// in the clear unless TLS stands in front.
func (c *Config) AdminCleartext() bool {
	u, ok := adminURL(c.Admin.PublicURL)
	return c.AdminExposed() && !(ok && u.Scheme == "https")
}

func (c *Config) adminListenExposed() bool {
	return c.AdminServed() && checkListen(c.Admin.Listen) == nil && !isLoopback(c.Admin.Listen)
}

func (c *Config) adminURLExposed() bool {
	u, ok := adminURL(c.Admin.PublicURL)
	return ok && c.AdminServed() && !isLoopbackHost(u.Hostname())
}

// adminURL parses admin.public_url; ok is false unless it is an http(s)
// URL with a host.
func adminURL(raw string) (u *url.URL, ok bool) {
	u, err := url.Parse(raw)
	return u, err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// MinAdminSecret is the fewest characters admin.token and admin.password
// may have when the admin listener is reachable from other hosts.
const MinAdminSecret = 16

// checkListen refuses a listen address that is not host:port with a port
// from 0 to 65535 (0 picks a free one), which would fail only at bind.
func checkListen(listen string) error {
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return errors.New("is not host:port")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return errors.New("has no port from 0 to 65535")
	}
	return nil
}

// listensOverlap reports whether two valid listen addresses would take one
// socket: the same port, not 0, on hosts that meet. An empty host, 0.0.0.0
// and :: listen everywhere and meet any host; localhost meets 127.0.0.1 and
// ::1, which it resolves to. Two other addresses meet only when they are the
// same: 127.0.0.1 and 127.0.0.2, or ::1, are separate sockets.
func listensOverlap(a, b string) bool {
	hostA, portA, _ := net.SplitHostPort(a)
	hostB, portB, _ := net.SplitHostPort(b)
	numA, errA := strconv.ParseUint(portA, 10, 16)
	numB, errB := strconv.ParseUint(portB, 10, 16)
	if errA != nil || errB != nil || numA != numB || numA == 0 {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	localhost := func(h, other string) bool {
		ip := net.ParseIP(other)
		return strings.EqualFold(h, "localhost") && ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback))
	}
	ipA, ipB := net.ParseIP(hostA), net.ParseIP(hostB)
	return wildcard(hostA) || wildcard(hostB) || strings.EqualFold(hostA, hostB) ||
		ipA != nil && ipA.Equal(ipB) || localhost(hostA, hostB) || localhost(hostB, hostA)
}

// isLoopback reports whether a host:port listens on loopback only. An empty
// host or 0.0.0.0 listens everywhere; a name other than localhost may
// resolve anywhere, so it is not loopback. It reads the configured address,
// never a request.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	return err == nil && isLoopbackHost(host)
}

// isLoopbackHost is isLoopback of a host alone.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackOf is addr's port on 127.0.0.1: the address to suggest in place
// of one exposed. DefaultAdminListen when addr has no port.
func loopbackOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return DefaultAdminListen
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// defaultAtRiskMargin is alerts.at_risk_margin's default for a source: a
// sixth of its replay window (12h of Stripe's 72h), time to act before the
// provider's last redelivery.
func defaultAtRiskMargin(replayWindow time.Duration) time.Duration { return replayWindow / 6 }

// AtRiskAfter returns, per source, the age from first delivery past which an
// unfinished event is at risk: its replay window minus the margin.
func (c *Config) AtRiskAfter() map[string]time.Duration {
	out := make(map[string]time.Duration, len(c.Sources))
	for _, s := range c.Sources {
		margin := c.Alerts.AtRiskMargin.Duration
		if margin == 0 {
			margin = defaultAtRiskMargin(s.ReplayWindow.Duration)
		}
		out[s.Name] = s.ReplayWindow.Duration - margin
	}
	return out
}

// StatsParams returns the store stats parameters of this configuration.
func (c *Config) StatsParams(limit int) *ferry.EventStatsParams {
	return &ferry.EventStatsParams{AtRiskAfter: c.AtRiskAfter(), AtRiskLimit: limit}
}

// Redaction names each generic HMAC source's signature header, which the
// dashboard and the CLI show redacted as they do the providers'.
func (c *Config) Redaction() ferryhttp.Redaction {
	r := ferryhttp.Redaction{}
	for _, s := range c.Sources {
		if s.HMAC.Header != "" {
			r[s.Name] = []string{s.HMAC.Header}
		}
	}
	return r
}

// SourceNames lists the configured sources in file order.
func (c *Config) SourceNames() []string {
	out := make([]string, len(c.Sources))
	for i, s := range c.Sources {
		out[i] = s.Name
	}
	return out
}
