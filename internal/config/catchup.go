package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry/catchup"
)

// Catchup is a source's [source.catchup] table: fetch from the provider's
// API what it never delivered (Stripe and GitHub only; see
// docs/operations.md).
type Catchup struct {
	// APIKey is Stripe's secret or restricted key: "${STRIPE_API_KEY}".
	APIKey string `toml:"api_key"`
	// Token is a GitHub token that may read the hook's deliveries.
	Token string `toml:"token"`
	// AppID, PrivateKey and InstallationID authenticate as a GitHub App
	// instead of Token.
	AppID          string `toml:"app_id"`
	PrivateKey     string `toml:"private_key"`
	InstallationID string `toml:"installation_id"`
	// Interval is how often serve runs a pass; "0" turns the loop off
	// (`ferry reconcile` still works). Defaults to 15m; at least 1m, at
	// most catchup.MaxInterval for the provider's and the source's
	// retention (GitHub: 11h59m40s).
	Interval *Duration `toml:"interval"`
	// Lookback is the first pass's window; later passes start at the
	// checkpoint however old it is. Defaults to 72h.
	Lookback Duration `toml:"lookback"`
	// APIBase overrides the provider's API URL (tests, proxies, GitHub
	// Enterprise).
	APIBase string `toml:"api_base"`
	// Hook is the GitHub hook whose deliveries are read:
	// "repos/OWNER/REPO/hooks/ID", "orgs/ORG/hooks/ID" or "app/hook".
	Hook string `toml:"hook"`
	// Types are the Stripe event types listed: those the endpoint is
	// subscribed to (its enabled_events), any number, or ["*"] for every
	// type (more than Stripe's own "*" subscription, which leaves out the
	// types that need explicit selection). Required for Stripe, whose listing is the whole account's:
	// without it, events of other types and other endpoints would reach
	// the app. catchup.NewStripe checks it.
	Types []string `toml:"types"`
	// OnlyFailed lists only Stripe events whose delivery failed. Defaults
	// to false.
	OnlyFailed bool `toml:"only_failed"`
	// APIVersion is the Stripe API version the endpoint is sent events in;
	// an event the API renders in another is skipped. Defaults to "":
	// every version is taken. See catchup.StripeOptions.
	APIVersion string `toml:"api_version"`
	// Rate is API requests a second, from minRate to maxRate. Defaults to
	// 5.
	Rate float64 `toml:"rate"`
}

// Bounds of [source.catchup] rate.
const (
	// minRate is a request every 10s: a pass must list its window within
	// the pass timeout (5m at least), and a lower rate would wait days.
	minRate = 0.1
	// maxRate is Stripe's test-mode limit.
	maxRate = 25
)

// Enabled reports whether the source has a [source.catchup] table with
// credentials.
func (c *Catchup) Enabled() bool {
	return c.APIKey != "" || c.Token != "" || c.AppID != "" || c.PrivateKey != ""
}

// LoopInterval is how often serve runs a catch-up pass of the source: 0
// when it runs none (no [source.catchup], or interval "0").
func (c *Catchup) LoopInterval() time.Duration {
	if !c.Enabled() {
		return 0
	}
	return c.Interval.Duration
}

// written lists the keys set in a table without credentials, which would
// otherwise leave catch-up silently off.
func (c *Catchup) written() []string {
	var keys []string
	for k, set := range map[string]bool{
		"hook": c.Hook != "", "api_base": c.APIBase != "", "types": len(c.Types) > 0,
		"installation_id": c.InstallationID != "", "only_failed": c.OnlyFailed, "api_version": c.APIVersion != "", "rate": c.Rate != 0,
		"lookback": c.Lookback.Duration != 0, "interval": c.Interval != nil,
	} {
		if set {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// applyDefaults fills a table that has credentials; one without is left
// as written, for validate to name its keys.
func (c *Catchup) applyDefaults() {
	if !c.Enabled() {
		return
	}
	if c.Interval == nil {
		c.Interval = &Duration{Duration: catchup.DefaultInterval}
	}
	if c.Lookback.Duration == 0 {
		c.Lookback.Duration = catchup.DefaultLookback
	}
	if c.Rate == 0 {
		c.Rate = catchup.DefaultRate
	}
}

// Reconciler builds the source's reconciler; it checks the table as it
// goes. A source without catch-up returns nil, nil.
func (s *Source) Reconciler() (catchup.Reconciler, error) {
	c := s.Catchup
	if !c.Enabled() {
		return nil, nil
	}
	switch s.Provider {
	case "stripe":
		if c.Token != "" || c.AppID != "" || c.PrivateKey != "" || c.InstallationID != "" || c.Hook != "" {
			return nil, fmt.Errorf("catchup: token, app_id, private_key, installation_id and hook are GitHub's; Stripe takes api_key")
		}
		return catchup.NewStripe(catchup.StripeOptions{APIKey: c.APIKey, APIBase: c.APIBase, Types: c.Types, OnlyFailed: c.OnlyFailed, APIVersion: c.APIVersion, Rate: c.Rate})
	case "github":
		if c.APIKey != "" || len(c.Types) > 0 || c.OnlyFailed || c.APIVersion != "" {
			return nil, fmt.Errorf("catchup: api_key, types, only_failed and api_version are Stripe's; GitHub takes token (or app_id, private_key, installation_id) and hook")
		}
		return catchup.NewGitHub(catchup.GitHubOptions{
			Hook: c.Hook, Token: c.Token, AppID: c.AppID, PrivateKey: c.PrivateKey, InstallationID: c.InstallationID,
			APIBase: c.APIBase, Rate: c.Rate,
		})
	}
	return nil, fmt.Errorf("catchup: provider %q has no API that lists missed deliveries (only stripe and github do); remove [source.catchup] and see docs/operations.md for what to do instead", s.Provider)
}

func (c *Catchup) validate(key string, s *Source) []error {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.catchup.%s: "+format, append([]any{key, k}, args...)...))
	}
	if !c.Enabled() {
		if keys := c.written(); len(keys) > 0 {
			bad("api_key", "missing, but %s set: catch-up needs credentials: api_key for Stripe, token (or app_id and private_key) for GitHub; add them, or remove [source.catchup]", strings.Join(keys, ", "))
		}
		return errs
	}
	if c.Interval.Duration < 0 || (c.Interval.Duration > 0 && c.Interval.Duration < time.Minute) {
		bad("interval", "is %v: use at least 1m, or \"0\" to turn the loop off", c.Interval.Duration)
	}
	if c.Lookback.Duration < time.Minute {
		bad("lookback", "is %v: use at least 1m (the default is %v)", c.Lookback.Duration, catchup.DefaultLookback)
	}
	if most := s.Retention.Duration - catchup.DefaultOverlap; s.windowsValid() && c.Lookback.Duration > most {
		bad("lookback", "is %v, past the source's retention %v: an older event may have been processed and purged, and catch-up would send it again; use at most %v, or raise retention", c.Lookback.Duration, s.Retention.Duration, most)
	}
	if !(c.Rate >= minRate && c.Rate <= maxRate) { // NaN fails both
		bad("rate", "is %v requests a second: use at least %v (a request every 10s) and at most %v (Stripe's test-mode limit), or leave it out for %v", c.Rate, minRate, maxRate, catchup.DefaultRate)
	}
	if c.APIBase != "" {
		// Checked here, not by the reconciler, whose refusal quotes the
		// URL whole: it may carry a key before its "@".
		if u, err := url.Parse(c.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("api_base", "%s", notHTTPURL(c.APIBase, "is not an http(s) URL", `write it like "https://api.stripe.com", or leave it out for the provider's API`))
			return errs
		}
	}
	var optErr *catchup.OptionError
	rec, err := s.Reconciler()
	switch {
	case errors.As(err, &optErr):
		bad(optErr.Option, "%s", optErr.Problem)
	case err != nil:
		errs = append(errs, fmt.Errorf("%s.%v", key, err))
	case c.Interval.Duration > 0:
		if e := c.checkInterval(rec.Retention(), s); e != "" {
			bad("interval", "%s", e)
		}
	}
	return errs
}

// checkInterval names the problem of an interval past catchup.MaxInterval
// for the provider's retention kept and the source's; "" when it fits.
func (c *Catchup) checkInterval(kept time.Duration, s *Source) string {
	var retention time.Duration
	if s.windowsValid() {
		retention = s.Retention.Duration
	}
	most, bounded := catchup.MaxInterval(kept, retention)
	if !bounded || c.Interval.Duration <= most {
		return ""
	}
	reach := fmt.Sprintf("the provider keeps events %v", kept)
	if retention > 0 && (kept <= 0 || retention-catchup.DefaultOverlap < kept) {
		reach = fmt.Sprintf("the source's retention is %v, less %v for the provider's clock", retention, catchup.DefaultOverlap)
	}
	why := fmt.Sprintf("is %v, too long: %s, and an instance that crashes holding the catch-up lease keeps the others out for max(interval, 5m) + interval, so an event could age out before any pass looked at it (3 intervals, 3 pass timeouts and the 2m settle must fit)", c.Interval.Duration, reach)
	if most < time.Minute {
		return why + "; no interval of 1m or more fits: raise retention"
	}
	return fmt.Sprintf("%s; use at most %v", why, most)
}

// CatchupSourceNames lists the sources with catch-up configured.
func (c *Config) CatchupSourceNames() []string {
	var out []string
	for _, s := range c.Sources {
		if s.Catchup.Enabled() {
			out = append(out, s.Name)
		}
	}
	return out
}

// CatchupCredentialsKey names the keys of the named source's catch-up
// credentials, as a config error names keys: "source[0]
// (stripe).catchup.api_key"; "" for a source not in the config.
func (c *Config) CatchupCredentialsKey(name string) string {
	for i, s := range c.Sources {
		if s.Name != name {
			continue
		}
		key := "api_key"
		switch {
		case s.Provider == "github" && s.Catchup.Token != "":
			key = "token"
		case s.Provider == "github":
			key = "app_id and private_key"
		}
		return SourceKey(i, name) + ".catchup." + key
	}
	return ""
}

// CatchupNotFoundKeys names the keys a JSON 404 from the named GitHub
// source's API points at: GitHub answers 404 for a hook or an installation
// that does not exist, and to credentials that may not see them, so the
// hook (and installation_id) come first, then the credentials. "" for a
// source not in the config, or not GitHub's.
func (c *Config) CatchupNotFoundKeys(name string) string {
	for i, s := range c.Sources {
		if s.Name != name {
			continue
		}
		if s.Provider != "github" {
			return ""
		}
		k := SourceKey(i, name) + ".catchup."
		switch {
		case s.Catchup.Token != "":
			return k + "hook and " + k + "token"
		case strings.Trim(s.Catchup.Hook, "/") == "app/hook":
			return k + "hook, " + k + "app_id and " + k + "private_key"
		}
		return k + "hook, " + k + "installation_id, " + k + "app_id and " + k + "private_key"
	}
	return ""
}
