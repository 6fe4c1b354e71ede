// Package config reads and checks the ferry service's TOML configuration.
// Every error names the key at fault and the fix, so a bad config stops the
// service at start rather than losing events later.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/quoted"
	"github.com/ferry-inbox/ferry/provider"
)

// Config is the whole file.
type Config struct {
	Store   Store    `toml:"store"`
	HTTP    HTTP     `toml:"http"`
	Worker  Worker   `toml:"worker"`
	Sources []Source `toml:"source"`
	Admin   Admin    `toml:"admin"`
	UI      UI       `toml:"ui"`
	Metrics Metrics  `toml:"metrics"`
	Alerts  Alerts   `toml:"alerts"`

	Telemetry Telemetry `toml:"telemetry"`
}

// Store says where events live.
type Store struct {
	// URL is "sqlite:PATH" (the embedded default) or "postgres://...".
	URL string `toml:"url"`
	// Migrate runs migrations at start. Defaults to true.
	Migrate *bool `toml:"migrate"`
}

// HTTP is the public listener: the receiver and health checks, nothing
// else. The dashboard and /metrics are on [admin] listen.
type HTTP struct {
	// Listen is host:port. Defaults to 127.0.0.1:8080.
	Listen string `toml:"listen"`
	// StoreTimeout bounds one durable receive; past it the provider gets 503
	// and retries. Defaults to 10s.
	StoreTimeout Duration `toml:"store_timeout"`
	// RetryAfter is the Retry-After sent with a 503. Defaults to 5s.
	RetryAfter Duration `toml:"retry_after"`
	// MaxInFlight bounds the body bytes the receiver holds at once, in
	// bytes (ferryhttp.ReceiverOptions.MaxInFlightBytes). Defaults to
	// ferryhttp.DefaultMaxInFlightBytes, 8 MiB, or the largest source's
	// MaxBody if larger; set, it may not be less than any MaxBody.
	MaxInFlight int64 `toml:"max_in_flight"`
	// BodyTimeout bounds how long a body may take to arrive once its
	// headers have (ferryhttp.ReceiverOptions.BodyTimeout). Defaults to
	// ferryhttp.DefaultBodyTimeout, 10s.
	BodyTimeout Duration `toml:"body_timeout"`
	// ShutdownDelay is how long serve keeps storing deliveries after a stop
	// signal while /readyz fails, so a load balancer (a Kubernetes Service,
	// whose endpoints change after the signal) stops sending before the
	// listener closes. Defaults to 0: the listener closes once the workers
	// have stopped. A worker-only process has none.
	ShutdownDelay Duration `toml:"shutdown_delay"`

	// listenFlag names the command-line flag that set Listen ("--listen";
	// ListenFlag), so an error about the address says where it came from.
	listenFlag string
}

// ListenFlag is the override of http.listen by the command-line flag
// named flag: errors about the address name the flag, and a fix changes it
// rather than a key the file may not hold.
func ListenFlag(flag, addr string) func(*Config) {
	return func(c *Config) { c.HTTP.Listen, c.HTTP.listenFlag = addr, flag }
}

// Worker tunes the engine; see ferry.Config for each default.
type Worker struct {
	Workers       int      `toml:"workers"`
	LeaseTTL      Duration `toml:"lease_ttl"`
	Heartbeat     Duration `toml:"heartbeat"`
	PollInterval  Duration `toml:"poll_interval"`
	ShutdownGrace Duration `toml:"shutdown_grace"`
	// RetryBase and RetryCap shape the backoff between failed attempts.
	RetryBase Duration `toml:"retry_base"`
	RetryCap  Duration `toml:"retry_cap"`
}

// Source is one webhook sender.
type Source struct {
	Name     string   `toml:"name"`
	Provider string   `toml:"provider"`
	Secrets  []string `toml:"secrets"`
	// Tolerance for signed timestamps (Stripe, Standard Webhooks). Defaults
	// to 5m.
	Tolerance Duration `toml:"tolerance"`
	// MaxBody is the largest body accepted, in bytes. Defaults to 1 MiB.
	MaxBody int64 `toml:"max_body"`
	// ReplayWindow is how long the provider redelivers. Defaults to 72h.
	ReplayWindow Duration `toml:"replay_window"`
	// Retention is how long done events are kept (deduplication needs them
	// for at least the replay window). Defaults to twice the replay window.
	Retention Duration `toml:"retention"`
	// MaxAttempts before an event goes dead. Defaults to 25.
	MaxAttempts int `toml:"max_attempts"`
	// LostLease is "retry" (default) or "hold".
	LostLease string `toml:"lost_lease"`
	// DetectReplays answers a delivery of a body stored within the replay
	// window under another event id as a replay: 200, kept on the stored
	// event, never processed. Defaults to true for providers whose
	// signature does not cover the id (github, shopify, hmac) and false
	// for those whose does (stripe, standardwebhooks). Turn it off for a
	// sender that legitimately repeats identical bodies under new ids:
	// those would be dropped as replays.
	DetectReplays *bool `toml:"detect_replays"`
	// HMAC describes a generic HMAC sender (provider = "hmac").
	HMAC HMAC `toml:"hmac"`
	// Forward is where the service sends each event.
	Forward Forward `toml:"forward"`
	// Catchup fetches what the provider never delivered; see catchup.go.
	Catchup Catchup `toml:"catchup"`
}

// HMAC mirrors provider.HMACOptions.
type HMAC struct {
	Header        string `toml:"header"`
	Prefix        string `toml:"prefix"`
	Encoding      string `toml:"encoding"`
	Algorithm     string `toml:"algorithm"`
	EventIDHeader string `toml:"event_id_header"`
	EventIDField  string `toml:"event_id_field"`
	TypeHeader    string `toml:"type_header"`
	TypeField     string `toml:"type_field"`
	// Mode is what the MAC covers: "body" (the default) or
	// "id.timestamp.body", which also authenticates the id and the time.
	Mode            string `toml:"mode"`
	TimestampHeader string `toml:"timestamp_header"`
}

// Forward is the app that receives events from the service.
type Forward struct {
	// URL receives a POST per event. Required for a worker.
	URL string `toml:"url"`
	// Secret signs forwarded requests the Standard Webhooks way
	// ("whsec_" + base64). Optional; unsigned when empty and no Secrets.
	Secret string `toml:"secret"`
	// Secrets are Secret's form for a roll: each signs every request (one
	// signature each in Webhook-Signature), so the app may switch to the
	// new one at any time. Secret or Secrets, not both.
	Secrets []string `toml:"secrets"`
	// Timeout per request. Defaults to 10s.
	Timeout Duration `toml:"timeout"`
}

// SigningSecrets are the secrets forwarded requests are signed with:
// Secrets, or Secret alone; none when unsigned.
func (f *Forward) SigningSecrets() []string {
	if f.Secret != "" {
		return []string{f.Secret}
	}
	return f.Secrets
}

// Duration is a time.Duration written as "15s", "72h", or with a ${NAME}
// that Parse expands.
type Duration struct {
	time.Duration
	ref string // the text as written, when it holds a ${NAME}
}

func (d *Duration) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		// Zero, as "0s" is: Parse then names the key whose zero means its
		// default, rather than refusing it as no duration.
		d.Duration = 0
		return nil
	}
	if envRef.Match(b) {
		d.ref = string(b)
		return nil
	}
	return d.set(string(b))
}

func (d *Duration) set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		// Not echoed: the parser names the line and the key.
		return errors.New("not a duration: write it like 15s, 5m or 72h")
	}
	d.Duration = v
	return nil
}

// expand parses a duration written with a ${NAME} once it is expanded.
func (d *Duration) expand(key string, lookup func(string) (string, bool)) []error {
	if d.ref == "" {
		return nil
	}
	ref := d.ref
	d.ref = ""
	s, err := expandEnv(ref, lookup)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", key, err)}
	}
	if err := d.set(s); err != nil {
		// The value came from the environment: name where, never what.
		return []error{fmt.Errorf("%s: %s does not expand to a duration; set it like \"15s\", \"5m\" or \"72h\"", key, ref)}
	}
	return nil
}

// Defaults applied by Load.
const (
	DefaultListen       = "127.0.0.1:8080"
	DefaultMaxBody      = ferryhttp.DefaultMaxBodyBytes
	DefaultStoreTimeout = ferryhttp.DefaultStoreTimeout
	DefaultRetryAfter   = ferryhttp.DefaultRetryAfter
	DefaultForwardTime  = ferryhttp.DefaultForwardTimeout
)

// MinPollInterval is the least worker.poll_interval: each look is a store
// query, and a shorter interval spins a CPU for nothing.
const MinPollInterval = 10 * time.Millisecond

// MinTolerance is the least tolerance a source may set: a delivery's signed
// time is seconds old on arrival, a provider's retry may be older, and
// clocks drift; below a minute honest deliveries fail as stale.
const MinTolerance = time.Minute

// Floors of keys whose tiny value would pass every other check and then
// fail each event, the key unnamed.
const (
	// MinStoreTimeout is the least http.store_timeout: a durable receive
	// waits for a commit that reaches the disk, milliseconds on a good day
	// and more under load; below a second deliveries get 503 store_timeout
	// until the provider gives up.
	MinStoreTimeout = time.Second
	// MinBodyTimeout is the least http.body_timeout: a body that comes in
	// more than one packet takes a round trip or more to arrive, and below
	// a second a distant provider's larger deliveries get 408 body_timeout
	// (GitHub does not retry them).
	MinBodyTimeout = time.Second
	// MinForwardTimeout is the least forward.timeout: below a second an
	// app's ordinary answer (a round trip and its work) times out and every
	// attempt fails until the event dies.
	MinForwardTimeout = time.Second
	// MinReplayWindow is the least replay_window, an hour: an event that
	// fails when older than the window goes dead, the backoff between
	// attempts grows to retry_cap (1h by default), and done events are
	// purged hourly; a shorter window kills an event over an app's brief
	// outage and keeps its key for no less than the purge's hour anyway.
	MinReplayWindow = time.Hour
)

// Upper bounds, far past any real setting, that keep the sums and products
// derived from a key (retention, the memory limit) from overflowing.
const (
	// MaxReplayWindow is a year: no provider redelivers for longer, and
	// the default retention, twice the window, stays far from overflow.
	MaxReplayWindow = 365 * 24 * time.Hour
	// MaxBodyLimit is 1 GiB for a source's max_body: no provider sends a
	// webhook near it (GitHub caps payloads at 25 MB).
	MaxBodyLimit int64 = 1 << 30
	// MaxInFlightLimit is 64 GiB for http.max_in_flight.
	MaxInFlightLimit int64 = 64 << 30
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("config invalid")

// Load reads, expands and checks the file at path. Each override (a
// command-line flag) sets its key after the file is read, before the
// defaults and the checks, so a flag is held to the rules of the key.
func Load(path string, overrides ...func(*Config)) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(raw, os.LookupEnv, overrides...)
}

// unknownKeys names each undecoded key once, in file order, leaving out
// the keys of a table itself unknown: a misspelled [source.foward] is one
// mistake, whatever it holds and however many sources have it.
func unknownKeys(undecoded []toml.Key) []string {
	var keys, shown []string
	for _, k := range undecoded {
		name := k.String()
		if slices.Contains(keys, name) || slices.ContainsFunc(keys, func(table string) bool { return strings.HasPrefix(name, table+".") }) {
			continue
		}
		keys = append(keys, name)
		if near := nearestKey(k); near != "" {
			name += " (" + near + "?)"
		}
		shown = append(shown, name)
	}
	return shown
}

// nearestKey is the key of k's table that k most likely misspells (at
// most two letters added, dropped, changed or swapped), or "".
func nearestKey(k toml.Key) string {
	t := reflect.TypeFor[Config]()
	for _, part := range k[:len(k)-1] {
		field, ok := tomlField(t, part)
		if !ok {
			return ""
		}
		t = field.Type
		if t.Kind() == reflect.Slice {
			t = t.Elem() // [[source]]
		}
		if t.Kind() != reflect.Struct {
			return ""
		}
	}
	best, bestDistance := "", 3
	for field := range t.Fields() {
		name := tomlName(field)
		if d := editDistance(k[len(k)-1], name); name != "" && d < bestDistance {
			best, bestDistance = name, d
		}
	}
	return best
}

// tomlName is the key a field is written as: its toml tag's name.
func tomlName(field reflect.StructField) string {
	name, _, _ := strings.Cut(field.Tag.Get("toml"), ",")
	return name
}

// tomlField is t's field whose key is name.
func tomlField(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for field := range t.Fields() {
		if tomlName(field) == name {
			return field, true
		}
	}
	return reflect.StructField{}, false
}

// editDistance counts the letters to add, drop or change, and the
// neighbours to swap, that turn a into b.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Parse is Load on bytes, with lookup resolving ${NAME} references.
func Parse(raw []byte, lookup func(string) (string, bool), overrides ...func(*Config)) (*Config, error) {
	var c Config
	md, err := toml.Decode(string(raw), &c)
	if err != nil {
		return nil, decodeError(err)
	}
	// Every mistake in one error, so that one edit fixes them all; only
	// references that did not expand stop it early, since what validation
	// would say of their values is noise.
	var errs []error
	if keys := unknownKeys(md.Undecoded()); len(keys) > 0 {
		errs = append(errs, fmt.Errorf("unknown key %s: check its spelling against docs/configuration.md", strings.Join(keys, ", ")))
	}
	// A whole $NAME is judged as written: once expanded, a ${NAME} whose
	// value starts with $ would look the same.
	for _, cr := range c.credentials() {
		if bareRef.MatchString(cr.value) {
			errs = append(errs, fmt.Errorf("%s: is a $NAME, which ferry keeps as written, not read from the environment: write ${NAME} to read it (only that form is read; a secret that is itself $ and a name goes in a variable)", cr.key))
		}
	}
	if xerrs := expand(reflect.ValueOf(&c).Elem(), "", lookup); len(xerrs) > 0 {
		return nil, fmt.Errorf("%w:\n  %w", ErrInvalid, joinLines(append(errs, xerrs...)))
	}
	for _, override := range overrides {
		override(&c)
	}
	zeros := writtenZeros(md, &c)
	c.applyDefaults()
	c.applyOperatorDefaults()
	errs = append(errs, zeroMeansDefault(zeros)...)
	errs = append(errs, c.validate()...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w:\n  %w", ErrInvalid, joinLines(errs))
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	if c.Store.Migrate == nil {
		t := true
		c.Store.Migrate = &t
	}
	if c.HTTP.Listen == "" {
		c.HTTP.Listen = DefaultListen
	}
	if c.HTTP.StoreTimeout.Duration == 0 {
		c.HTTP.StoreTimeout.Duration = DefaultStoreTimeout
	}
	if c.HTTP.RetryAfter.Duration == 0 {
		c.HTTP.RetryAfter.Duration = DefaultRetryAfter
	}
	if c.Worker.ShutdownGrace.Duration == 0 {
		c.Worker.ShutdownGrace.Duration = ferry.DefaultShutdownGrace
	}
	if c.HTTP.BodyTimeout.Duration == 0 {
		c.HTTP.BodyTimeout.Duration = ferryhttp.DefaultBodyTimeout
	}
	if c.Worker.LeaseTTL.Duration == 0 {
		c.Worker.LeaseTTL.Duration = ferry.DefaultLeaseTTL
	}
	if c.Worker.Heartbeat.Duration == 0 && c.Worker.LeaseTTL.Duration > 0 {
		c.Worker.Heartbeat.Duration = ferry.MaxHeartbeat(c.Worker.LeaseTTL.Duration)
	}
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.MaxBody == 0 {
			s.MaxBody = DefaultMaxBody
		}
		if s.ReplayWindow.Duration == 0 {
			s.ReplayWindow.Duration = ferry.DefaultReplayWindow
		}
		// A negative window, or one past MaxReplayWindow, is refused
		// alone, not with a retention derived from it that the file does
		// not set.
		if s.Retention.Duration == 0 && s.ReplayWindow.Duration > 0 && s.ReplayWindow.Duration <= MaxReplayWindow {
			s.Retention.Duration = 2 * s.ReplayWindow.Duration
		}
		if s.MaxAttempts == 0 {
			s.MaxAttempts = ferry.DefaultMaxAttempts
		}
		if s.LostLease == "" {
			s.LostLease = string(ferry.LostLeaseRetry)
		}
		if s.DetectReplays == nil {
			on := s.signsOnlyTheBody()
			s.DetectReplays = &on
		}
		if s.Forward.Timeout.Duration == 0 {
			s.Forward.Timeout.Duration = DefaultForwardTime
		}
		s.Catchup.applyDefaults()
	}
	if c.HTTP.MaxInFlight == 0 {
		// Room for the largest body: a larger one would fit only while
		// nothing else is in flight.
		c.HTTP.MaxInFlight = ferryhttp.DefaultMaxInFlightBytes
		for _, s := range c.Sources {
			c.HTTP.MaxInFlight = max(c.HTTP.MaxInFlight, s.MaxBody)
		}
	}
}

func (c *Config) validate() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if _, _, err := c.StoreKind(); err != nil && !bareRef.MatchString(c.Store.URL) { // a $NAME: Parse said how to write it
		bad("store.url", "%v", err)
	}
	if err := checkListen(c.HTTP.Listen); err != nil {
		key := "http.listen"
		if c.HTTP.listenFlag != "" {
			key += " (from " + c.HTTP.listenFlag + ")"
		}
		bad(key, "%q %v: write it like \"127.0.0.1:8080\"", c.HTTP.Listen, err)
	}
	if c.HTTP.MaxInFlight < 0 || c.HTTP.MaxInFlight > MaxInFlightLimit {
		bad("http.max_in_flight", "is %d: use a positive number of bytes up to %d (64 GiB), or leave it out for %d", c.HTTP.MaxInFlight, MaxInFlightLimit, ferryhttp.DefaultMaxInFlightBytes)
	}
	// A negative duration would be taken for the default by some readers
	// and refused by others, late and without the key.
	nonNegative := func(key string, d Duration, def any) {
		if d.Duration < 0 {
			bad(key, "is %v: use a positive duration, or leave it out for %v", d.Duration, def)
		}
	}
	// A positive value under its floor: named with the value, the floor
	// and why.
	atLeast := func(key string, d Duration, floor, def time.Duration, why string) {
		if d.Duration > 0 && d.Duration < floor {
			bad(key, "is %v: use at least %v (the default is %v): %s", d.Duration, floor, def, why)
		}
	}
	nonNegative("http.store_timeout", c.HTTP.StoreTimeout, DefaultStoreTimeout)
	atLeast("http.store_timeout", c.HTTP.StoreTimeout, MinStoreTimeout, DefaultStoreTimeout, "a receive waits for a commit to reach the disk, and below that every delivery would get 503 store_timeout")
	nonNegative("http.retry_after", c.HTTP.RetryAfter, DefaultRetryAfter)
	nonNegative("http.body_timeout", c.HTTP.BodyTimeout, ferryhttp.DefaultBodyTimeout)
	atLeast("http.body_timeout", c.HTTP.BodyTimeout, MinBodyTimeout, ferryhttp.DefaultBodyTimeout, "a body sent in several packets takes a round trip or more, and below that a distant provider's larger deliveries would get 408 body_timeout")
	nonNegative("http.shutdown_delay", c.HTTP.ShutdownDelay, "0s (no delay)")
	w := c.Worker
	nonNegative("worker.poll_interval", w.PollInterval, ferry.DefaultPollInterval)
	nonNegative("worker.shutdown_grace", w.ShutdownGrace, ferry.DefaultShutdownGrace)
	nonNegative("worker.retry_base", w.RetryBase, "the default")
	nonNegative("worker.retry_cap", w.RetryCap, "the default")
	if w.PollInterval.Duration > 0 && w.PollInterval.Duration < MinPollInterval {
		bad("worker.poll_interval", "is %v: use at least %v (the default is %v): each look is a store query, and below that the worker spins a CPU", w.PollInterval.Duration, MinPollInterval, ferry.DefaultPollInterval)
	}
	if base, retryCap := cmp.Or(w.RetryBase.Duration, ferry.DefaultRetryBase), cmp.Or(w.RetryCap.Duration, ferry.DefaultRetryCap); base > 0 && retryCap > 0 && base > retryCap {
		if w.RetryBase.Duration == 0 { // the file set only the cap
			bad("worker.retry_cap", "is %v, below retry_base's default %v: the engine would cut every wait to the cap; set retry_base at most %v too", retryCap, base, retryCap)
		} else {
			bad("worker.retry_base", "is %v, above retry_cap %v: the engine would cut every wait to the cap; lower retry_base or raise retry_cap", base, retryCap)
		}
	}
	if w.Workers < 0 {
		bad("worker.workers", "is %d: use a positive number, or leave it out for %d", w.Workers, ferry.DefaultWorkers)
	}
	nonNegative("worker.heartbeat", w.Heartbeat, "lease_ttl / 3")
	// The heartbeat is checked against a valid TTL only: its default is a
	// third of the TTL, and a bound derived from a bad one says nothing.
	if w.LeaseTTL.Duration < time.Second {
		bad("worker.lease_ttl", "is %v: use at least 1s (the default is %v)", w.LeaseTTL.Duration, ferry.DefaultLeaseTTL)
	} else if most := ferry.MaxHeartbeat(w.LeaseTTL.Duration); w.Heartbeat.Duration >= 0 && w.Heartbeat.Duration > most { // 3 × heartbeat may overflow
		bad("worker.heartbeat", "is %v but lease_ttl is %v: the TTL must be at least 3 × heartbeat so a living worker survives two missed beats; use heartbeat ≤ %v", w.Heartbeat.Duration, w.LeaseTTL.Duration, most)
	}
	if len(c.Sources) == 0 {
		bad("source", "none configured: add a [[source]] table with name, provider and secrets")
	}
	seen := map[string]bool{}
	for i, s := range c.Sources {
		key := SourceKey(i, s.Name)
		switch {
		case s.Name == "":
			bad(key+".name", "missing: name the source; it becomes the URL path /webhooks/NAME")
		case !validName(s.Name):
			bad(key+".name", "%q: use letters, digits, '-' and '_' only (it is a URL path segment)", s.Name)
		case seen[s.Name]:
			bad(key+".name", "%q is used twice: source names must be unique", s.Name)
		}
		seen[s.Name] = true
		nonNegative(key+".tolerance", s.Tolerance, provider.DefaultTolerance)
		if s.Tolerance.Duration > 0 && s.Tolerance.Duration < MinTolerance {
			bad(key+".tolerance", "is %v: use at least %v (the default is %v): a delivery's signed time is seconds old when it arrives, and the two clocks differ, so every delivery would get 401 stale_timestamp", s.Tolerance.Duration, MinTolerance, provider.DefaultTolerance)
		}
		nonNegative(key+".replay_window", s.ReplayWindow, ferry.DefaultReplayWindow)
		atLeast(key+".replay_window", s.ReplayWindow, MinReplayWindow, ferry.DefaultReplayWindow, "an event that fails when older goes dead, and retries wait up to retry_cap (1h by default), so a shorter window kills events over a brief outage of the app")
		if s.ReplayWindow.Duration > MaxReplayWindow {
			bad(key+".replay_window", "is %v: use at most %v (a year; providers redeliver for days: Stripe and GitHub 72h)", s.ReplayWindow.Duration, MaxReplayWindow)
		}
		nonNegative(key+".retention", s.Retention, "2 × replay_window")
		if len(s.Secrets) == 0 {
			bad(key+".secrets", "missing: list the signing secret, e.g. secrets = [\"%s\"]", s.secretRef())
		}
		switch {
		case !slices.Contains(provider.Names(), s.Provider):
			bad(key+".provider", "%q: use one of %s", s.Provider, strings.Join(provider.Names(), ", "))
		case s.Provider != "hmac" && s.HMAC != (HMAC{}):
			bad(key+".hmac", "is set, but provider is %q: [source.hmac] describes a generic HMAC sender; remove the table, or set provider = \"hmac\"", s.Provider)
		case len(s.Secrets) > 0 && s.Tolerance.Duration >= 0: // else reported above
			var bad *provider.SecretError
			if _, err := c.Verifier(s); errors.As(err, &bad) {
				errs = append(errs, s.secretError(key, bad))
			} else if err != nil {
				errs = append(errs, optionsError(key, err))
			}
		}
		if s.MaxBody < 0 || s.MaxBody > MaxBodyLimit {
			bad(key+".max_body", "is %d: use a positive number of bytes up to %d (1 GiB), or leave it out for %d", s.MaxBody, MaxBodyLimit, DefaultMaxBody)
		} else if c.HTTP.MaxInFlight > 0 && s.MaxBody > c.HTTP.MaxInFlight {
			bad(key+".max_body", "is %d but http.max_in_flight is %d: such a body fits only when nothing else is in flight, so under steady traffic it gets 503 for ever; raise http.max_in_flight to at least %d, or lower max_body", s.MaxBody, c.HTTP.MaxInFlight, s.MaxBody)
		}
		if s.windowsValid() && s.Retention.Duration < s.ReplayWindow.Duration {
			bad(key+".retention", "%v is shorter than replay_window %v: a purged key would let a redelivery run the work again; use at least %v", s.Retention.Duration, s.ReplayWindow.Duration, s.ReplayWindow.Duration)
		}
		if s.windowsValid() && s.Tolerance.Duration >= s.Retention.Duration {
			bad(key+".tolerance", "is %v, not shorter than retention %v: a delivery signed that long ago would still pass once its key is purged, and run again as a new event; use less than %v (the default is %v)", s.Tolerance.Duration, s.Retention.Duration, s.Retention.Duration, provider.DefaultTolerance)
		}
		if s.MaxAttempts < 0 || s.MaxAttempts > ferry.MaxCount {
			bad(key+".max_attempts", "is %d: use a number from 1 to %d (the default is %d)", s.MaxAttempts, ferry.MaxCount, ferry.DefaultMaxAttempts)
		}
		if s.LostLease != string(ferry.LostLeaseRetry) && s.LostLease != string(ferry.LostLeaseHold) {
			bad(key+".lost_lease", "%q: use \"retry\" or \"hold\"", s.LostLease)
		}
		if s.Forward.URL != "" {
			if ferryhttp.CheckForwardURL(s.Forward.URL) != nil {
				bad(key+".forward.url", "%s", notHTTPURL(s.Forward.URL, "is not an http(s) URL with a port from 1 to 65535, if any", `write it like "http://127.0.0.1:3000/webhooks"`))
			}
		}
		nonNegative(key+".forward.timeout", s.Forward.Timeout, DefaultForwardTime)
		atLeast(key+".forward.timeout", s.Forward.Timeout, MinForwardTimeout, DefaultForwardTime, "below that the app's ordinary answer times out, and every attempt fails until the event dies")
		if s.Forward.Secret != "" && len(s.Forward.Secrets) > 0 {
			bad(key+".forward.secrets", "is set beside forward.secret: keep one (secrets lists several, to roll the app's secret)")
		}
		forwardSecret := func(k, secret string) {
			if _, err := provider.DecodeStandardWebhooksSecret(secret); err != nil {
				bad(k, "is not a Standard Webhooks secret (\"whsec_\" + base64): %v", err)
			}
		}
		if s.Forward.Secret != "" {
			forwardSecret(key+".forward.secret", s.Forward.Secret)
		}
		for j, secret := range s.Forward.Secrets {
			forwardSecret(fmt.Sprintf("%s.forward.secrets[%d]", key, j), secret)
		}
		errs = append(errs, s.Catchup.validate(key, &s)...)
	}
	errs = append(errs, c.validateOperator()...)
	errs = append(errs, c.paddedCredentials()...)
	return append(errs, c.validateTelemetry()...)
}

// credentialField is one secret of a Config and its key. exact is whether
// it is compared byte for byte (a signing secret, a token), so whitespace
// at either end is a mistake; a PEM key ends in a newline, a URL is
// checked as a URL.
type credentialField struct {
	key, value string
	exact      bool
}

// credentials lists every secret of c with its key: what no error shows,
// and what is checked as written (a whole $NAME) and as expanded
// (whitespace at either end of an exact one).
func (c *Config) credentials() []credentialField {
	var out []credentialField
	for i, s := range c.Sources {
		key := SourceKey(i, s.Name)
		for j, secret := range s.Secrets {
			out = append(out, credentialField{fmt.Sprintf("%s.secrets[%d]", key, j), secret, true})
		}
		for j, secret := range s.Forward.Secrets {
			out = append(out, credentialField{fmt.Sprintf("%s.forward.secrets[%d]", key, j), secret, true})
		}
		out = append(out, credentialField{key + ".forward.secret", s.Forward.Secret, true},
			credentialField{key + ".catchup.api_key", s.Catchup.APIKey, true}, credentialField{key + ".catchup.token", s.Catchup.Token, true},
			credentialField{key + ".catchup.private_key", s.Catchup.PrivateKey, false})
	}
	return append(out, credentialField{"admin.token", c.Admin.Token, true}, credentialField{"admin.password", c.Admin.Password, true},
		credentialField{"alerts.url", c.Alerts.URL, false}, credentialField{"store.url", c.Store.URL, false})
}

// paddedCredentials refuses a secret with whitespace at either end, which no
// sender's signature or client's header matches: every delivery or login
// would fail. The value is never shown.
func (c *Config) paddedCredentials() []error {
	var errs []error
	for _, cr := range c.credentials() {
		if cr.exact && cr.value != strings.TrimSpace(cr.value) {
			errs = append(errs, fmt.Errorf("%s: starts or ends with whitespace: remove the surrounding whitespace (a trailing newline from a file or variable?)", cr.key))
		}
	}
	return errs
}

// decodeError is the parser's refusal with its line and key, without the
// text it quotes or names: an unquoted secret (token = SEKRET, or password =
// 12345678901234567890 out of an integer's range) would be echoed.
func decodeError(err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%w: %v%s", ErrInvalid, err, mismatchFix(err.Error())) // type mismatches, which quote no value
	}
	where := fmt.Sprintf("line %d", pe.Position.Line)
	if pe.LastKey != "" {
		where += ", key " + pe.LastKey
	}
	msg, hidden := quoted.Hide(pe.Message, notShown)
	if outOfRange.MatchString(msg) {
		msg, hidden = outOfRange.ReplaceAllString(msg, notShown+" ${1}"), true
	}
	if hidden {
		msg += `; a string value goes in double quotes, like token = "${FERRY_ADMIN_TOKEN}"`
	}
	return fmt.Errorf("%w: %s: %s", ErrInvalid, where, msg)
}

// notShown stands in an error for text of the config that may be a secret.
const notShown = "text (not shown: it may be a secret)"

// mismatch matches the parser's refusal of a value of the wrong type; the
// parser has no error type for it, only this text.
var mismatch = regexp.MustCompile(`incompatible types: TOML value has type (\S+); destination has type (\S+)$`)

// mismatchFix is how to write a value of the type its key takes, for the
// parser's message msg; "" when msg is no type mismatch.
func mismatchFix(msg string) string {
	m := mismatch.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	switch got, want := m[1], m[2]; {
	case want == "slice":
		return `: write it as a list: ["..."]`
	case want == "boolean":
		return ": write true or false without quotes"
	case want == "integer" && got == "string":
		return ": write a bare number, without quotes (${NAME} works only in strings, durations and lists)"
	case want == "integer":
		return ": write a whole number, without quotes"
	case want == "float":
		return ": write a bare number, without quotes"
	case want == "string":
		return ": put the value in double quotes"
	}
	return ""
}

// outOfRange matches the parser's refusal of a number too large for its
// type, which names the number unquoted.
var outOfRange = regexp.MustCompile(`^\S+ (is out of (?:range for \S+|the safe \S+ range))$`)

func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return s != ""
}

// StoreKind splits store.url into "sqlite" and a path, or "postgres" and the
// URL itself.
func (c *Config) StoreKind() (kind, dsn string, err error) {
	u := c.Store.URL
	switch {
	case u == "":
		return "", "", errors.New("missing: set it to \"sqlite:ferry.db\" or \"postgres://user@host/db\"")
	case strings.HasPrefix(u, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(u, "sqlite:"), "//")
		if path == "" {
			return "", "", errors.New("\"sqlite:\" needs a file path, like \"sqlite:ferry.db\"")
		}
		return "sqlite", path, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return "postgres", u, nil
	}
	// Not echoed: a keyword/value DSN or a URL missing its "//" carries
	// its password where RedactURL cannot find it.
	return "", "", errors.New("neither \"sqlite:PATH\" nor \"postgres://...\" (the value is not shown: it may hold a password)")
}

// Verifier builds the source's signature verifier.
func (c *Config) Verifier(s Source) (ferry.Verifier, error) {
	return provider.New(s.Provider, s.ProviderOptions())
}

// optionsError is the provider's refusal of a source's options in the
// config's words: the [source.hmac] keys for the HMACOptions fields it names.
func optionsError(key string, err error) error {
	reason := strings.TrimPrefix(err.Error(), provider.ErrInvalidOptions.Error()+": ")
	if hmacField.MatchString(reason) {
		key += ".hmac"
		reason = hmacField.ReplaceAllStringFunc(reason, func(f string) string {
			if k, ok := hmacKeys[strings.TrimPrefix(f, "HMAC.")]; ok {
				return k
			}
			return f
		})
	}
	return fmt.Errorf("%s: %s", key, reason)
}

// secretRef is how a source's secret is best written: from the environment.
func (s *Source) secretRef() string {
	return "${" + strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_")) + "_WEBHOOK_SECRET}"
}

// secretError names the unusable entry of secrets and how to write it.
func (s *Source) secretError(key string, err *provider.SecretError) error {
	hint := "set it to the signing secret the provider shows"
	if s.Provider == "standardwebhooks" {
		hint = "set it to the sender's secret, \"whsec_\" followed by base64"
	}
	return fmt.Errorf("%s.secrets[%d]: %s: %s, e.g. \"%s\"", key, err.Index, err.Reason, hint, s.secretRef())
}

var hmacField = regexp.MustCompile(`\bHMAC\.[A-Za-z]+`)

// hmacKeys maps each provider.HMACOptions field name to its [source.hmac]
// key: HMAC mirrors the fields by name.
var hmacKeys = func() map[string]string {
	t := reflect.TypeFor[HMAC]()
	keys := make(map[string]string, t.NumField())
	for i := range t.NumField() {
		keys[t.Field(i).Name] = t.Field(i).Tag.Get("toml")
	}
	return keys
}()

// windowsValid reports whether replay_window and retention are not
// negative (nor the window past MaxReplayWindow), so a rule comparing them (or a key with them) says something.
func (s *Source) windowsValid() bool {
	return s.ReplayWindow.Duration > 0 && s.ReplayWindow.Duration <= MaxReplayWindow && s.Retention.Duration > 0
}

// ProviderOptions are the source's provider settings, for its verifier and
// for a signer that sends as the provider would (ferry send).
func (s *Source) ProviderOptions() provider.Options {
	return provider.Options{
		Secrets:   s.Secrets,
		Tolerance: s.Tolerance.Duration,
		HMAC: provider.HMACOptions{
			Header: s.HMAC.Header, Prefix: s.HMAC.Prefix,
			Encoding: provider.Encoding(s.HMAC.Encoding), Algorithm: provider.Algorithm(s.HMAC.Algorithm),
			EventIDHeader: s.HMAC.EventIDHeader, EventIDField: s.HMAC.EventIDField,
			TypeHeader: s.HMAC.TypeHeader, TypeField: s.HMAC.TypeField,
			Mode: provider.HMACMode(s.HMAC.Mode), TimestampHeader: s.HMAC.TimestampHeader,
		},
	}
}

// signsOnlyTheBody reports whether the source's signature leaves the event
// id unauthenticated, so a captured body re-sent under a new id verifies:
// GitHub, Shopify and generic HMAC in body mode.
func (s *Source) signsOnlyTheBody() bool {
	switch s.Provider {
	case "github", "shopify":
		return true
	case "hmac":
		return s.HMAC.Mode == "" || s.HMAC.Mode == string(provider.HMACModeBody)
	}
	return false
}

// ReceiveReplayWindow is the receiver's replay-detection window of s: its
// replay_window when detect_replays is on, 0 (off) otherwise.
func (s Source) ReceiveReplayWindow() time.Duration {
	if s.DetectReplays == nil || !*s.DetectReplays {
		return 0
	}
	return s.ReplayWindow.Duration
}

// Policies returns the engine's per-source policies.
func (c *Config) Policies() []ferry.SourcePolicy {
	out := make([]ferry.SourcePolicy, len(c.Sources))
	for i, s := range c.Sources {
		out[i] = ferry.SourcePolicy{Name: s.Name, MaxAttempts: s.MaxAttempts, ReplayWindow: s.ReplayWindow.Duration, LostLease: ferry.LostLeasePolicy(s.LostLease)}
	}
	return out
}

// RedactURL is s fit for an error or a log line: without its password (on
// http(s), or given alone, its user too: it may be a key), query and fragment, any of which may carry a token (an app's ?token=, a
// DSN's ?password=). A dropped query shows as "?…".
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable)" // url.Parse's error quotes s whole
	}
	hadQuery := u.RawQuery != "" || u.ForceQuery
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	// On http(s) the user is often the key itself (https://sk_live_…:@host,
	// https://ghp_…:x-oauth-basic@host), as is a user given alone; a
	// database URL's user is a role, kept beside its masked password.
	if _, hasPassword := u.User.Password(); u.User != nil && (!hasPassword || u.Scheme == "http" || u.Scheme == "https") {
		u.User = url.User("xxxxx")
	}
	out := u.Redacted()
	if u.User == nil {
		out = maskUserinfo(out)
	}
	if hadQuery {
		out += "?…"
	}
	return out
}

// notHTTPURL is the refusal of s by a key that takes an http(s) URL: s
// redacted, then problem and fix. A URL that does not parse is not shown
// (RedactURL cannot find its credentials) and is said to be unreadable,
// most often for want of its scheme ("127.0.0.1:3000/hook").
func notHTTPURL(s, problem, fix string) string {
	if _, err := url.Parse(s); err == nil {
		return fmt.Sprintf("%q %s: %s", RedactURL(s), problem, fix)
	}
	if !strings.Contains(s, "://") {
		return "cannot be read as a URL: it needs http:// or https:// in front (the value is not shown: it may hold a credential); " + fix
	}
	return "cannot be read as a URL (the value is not shown: it may hold a credential): " + fix
}

// maskUserinfo masks what url.Parse did not take for userinfo but may be:
// in "https//user:password@host" (its "://" mistyped) everything from the
// start of the path segment holding the first "@" to the last "@". It may
// hide a path's "@"; it never shows a password.
func maskUserinfo(s string) string {
	first, last := strings.IndexByte(s, '@'), strings.LastIndexByte(s, '@')
	if first < 0 {
		return s
	}
	start := strings.LastIndexByte(s[:first], '/') + 1
	return s[:start] + "xxxxx" + s[last:]
}

// SourceKey is how an error names source i's table: "source[0] (stripe)";
// doctor's fix lines name keys the same way.
func SourceKey(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("source[%d]", i)
	}
	return fmt.Sprintf("source[%d] (%s)", i, name)
}
