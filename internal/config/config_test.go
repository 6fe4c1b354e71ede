package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

const good = `
[store]
url = "sqlite:ferry.db"
[http]
listen = "127.0.0.1:8080"
[[source]]
name = "stripe"
provider = "stripe"
secrets = ["${STRIPE_WEBHOOK_SECRET}"]
replay_window = "72h"
[source.forward]
url = "http://127.0.0.1:3000/webhooks/stripe"
`

func TestParseDefaultsAndExpansion(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(good), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_abc$def"}))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sources[0]
	if s.Secrets[0] != "whsec_abc$def" {
		t.Errorf("secret = %q: ${} expansion must leave a literal $ alone", s.Secrets[0])
	}
	if s.MaxBody != DefaultMaxBody || s.Retention.Duration != 144*time.Hour || s.MaxAttempts != 25 || s.LostLease != "retry" {
		t.Errorf("source defaults: %+v", s)
	}
	if c.Worker.LeaseTTL.Duration != 15*time.Second || c.Worker.Heartbeat.Duration != 5*time.Second || !*c.Store.Migrate ||
		c.Worker.ShutdownGrace.Duration != ferry.DefaultShutdownGrace {
		t.Errorf("worker defaults: %+v", c.Worker)
	}
	if c.HTTP.MaxInFlight != ferryhttp.DefaultMaxInFlightBytes || c.HTTP.BodyTimeout.Duration != ferryhttp.DefaultBodyTimeout {
		t.Errorf("http defaults: %+v", c.HTTP)
	}
	if kind, path, err := c.StoreKind(); kind != "sqlite" || path != "ferry.db" || err != nil {
		t.Errorf("StoreKind = %s %s %v", kind, path, err)
	}
}

// Without http.max_in_flight, the receiver's budget has room for the
// largest body; set below one, it stops the start (TestParseRejects).
func TestMaxInFlightHoldsTheLargestBody(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(strings.Replace(good, `replay_window = "72h"`, `replay_window = "72h"`+"\nmax_body = 9000000", 1)),
		env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_abc"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.MaxInFlight != 9000000 {
		t.Errorf("max_in_flight = %d, want the largest max_body, 9000000", c.HTTP.MaxInFlight)
	}
}

// Every bad config stops the start with the key and the fix.
func TestParseRejects(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	for _, tc := range []struct {
		name, edit, from, wantKey, wantFix string
	}{
		{"missing env", `"${STRIPE_WEBHOOK_SECRET}"`, `"${NOPE}"`, "source[0].secrets[0]", "export it"},
		{"retention below replay window", `replay_window = "72h"`, `replay_window = "72h"` + "\nretention = \"24h\"", "retention", "use at least 72h"},
		{"ttl below 3 heartbeats", `[http]`, "[worker]\nlease_ttl = \"10s\"\nheartbeat = \"5s\"\n[http]", "worker.heartbeat", "heartbeat ≤"},
		{"bad url", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "ftp:/x"`, "forward.url", "http(s) URL"},
		{"bad url with a token", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "https//app.internal/hook?token=SEKRET"`, "forward.url", "http(s) URL"},
		{"unknown provider", `provider = "stripe"`, `provider = "paypal"`, "provider", "use one of"},
		{"no secrets", `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secrets = []`, "secrets", "STRIPE_WEBHOOK_SECRET"},
		{"an empty secret", `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secrets = ["${STRIPE_WEBHOOK_SECRET}", ""]`, "source[0] (stripe).secrets[1]: is empty", "the signing secret"},
		{"bad standard webhooks secret", "provider = \"stripe\"\nsecrets = [\"${STRIPE_WEBHOOK_SECRET}\"]", "provider = \"standardwebhooks\"\nsecrets = [\"whsec_SEKRET!\"]", "source[0] (stripe).secrets[0]: not whsec_", `"whsec_" followed by base64`},
		{"unknown key", `[http]`, "[http]\nlisten_addr = \"x\"", "unknown key", "spelling"},
		{"bad store", `url = "sqlite:ferry.db"`, `url = "mysql://x"`, "store.url", "sqlite:PATH"},
		{"listen port past 65535", `listen = "127.0.0.1:8080"`, `listen = "127.0.0.1:99999"`, "http.listen", "no port from 0 to 65535"},
		{"listen everywhere at the admin port", `listen = "127.0.0.1:8080"`, `listen = ":8081"`, "admin.listen", "a listener of its own"},
		{"heartbeat whose triple overflows", `[http]`, "[worker]\nheartbeat = \"1000000h\"\n[http]", "worker.heartbeat", "heartbeat ≤ 5s"},
		{"replay_window past a year", `replay_window = "72h"`, `replay_window = "2000000h"`, "source[0] (stripe).replay_window: is 2000000h", "use at most 8760h"},
		{"max_body past 1 GiB", `replay_window = "72h"`, `replay_window = "72h"` + "\nmax_body = 9223372036854775807", "source[0] (stripe).max_body: is 9223372036854775807", "up to 1073741824"},
		{"max_in_flight past 64 GiB", `[http]`, "[http]\nmax_in_flight = 9223372036854775807", "http.max_in_flight", "up to 68719476736"},
		{"tolerance past retention", `replay_window = "72h"`, `replay_window = "72h"` + "\ntolerance = \"8760h\"", "source[0] (stripe).tolerance: is 8760h0m0s, not shorter than retention 144h0m0s", "run again as a new event"},
		{"tolerance below a minute", `replay_window = "72h"`, `replay_window = "72h"` + "\ntolerance = \"1ns\"", "source[0] (stripe).tolerance: is 1ns", "use at least 1m0s (the default is 5m0s)"},
		{"forward port past 65535", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:99999/x"`, "source[0] (stripe).forward.url", "port from 1 to 65535"},
		{"store_timeout below a second", `[http]`, "[http]\nstore_timeout = \"1ns\"", "http.store_timeout: is 1ns", "use at least 1s (the default is 10s)"},
		{"body_timeout below a second", `[http]`, "[http]\nbody_timeout = \"300ms\"", "http.body_timeout: is 300ms", "use at least 1s (the default is 10s)"},
		{"forward timeout below a second", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\ntimeout = \"999ms\"", "source[0] (stripe).forward.timeout: is 999ms", "use at least 1s (the default is 10s)"},
		{"replay_window below an hour", `replay_window = "72h"`, `replay_window = "59m"`, "source[0] (stripe).replay_window: is 59m0s", "use at least 1h0m0s (the default is 72h0m0s)"},
		{"poll_interval below 10ms", `[http]`, "[worker]\npoll_interval = \"1ns\"\n[http]", "worker.poll_interval: is 1ns", "use at least 10ms"},
		{"retry_base above retry_cap", `[http]`, "[worker]\nretry_base = \"10m\"\nretry_cap = \"1m\"\n[http]", "worker.retry_base: is 10m0s, above retry_cap 1m0s", "raise retry_cap"},
		{"retry_base above the default cap", `[http]`, "[worker]\nretry_base = \"2h\"\n[http]", "worker.retry_base: is 2h0m0s, above retry_cap 1h0m0s", "raise retry_cap"},
		{"retry_cap below the default base", `[http]`, "[worker]\nretry_cap = \"500ms\"\n[http]", "worker.retry_cap: is 500ms, below retry_base's default 1s", "set retry_base"},
		{"negative max_in_flight", `[http]`, "[http]\nmax_in_flight = -1", "http.max_in_flight", "positive number of bytes"},
		{"max_body past max_in_flight", "\n[[source]]", "\nmax_in_flight = 8388608\n[[source]]\nmax_body = 9000000", "source[0] (stripe).max_body: is 9000000 but http.max_in_flight is 8388608", "raise http.max_in_flight to at least 9000000"},
		{"negative body_timeout", `[http]`, "[http]\nbody_timeout = \"-1s\"", "http.body_timeout", "positive duration"},
		{"negative store_timeout", `[http]`, "[http]\nstore_timeout = \"-1s\"", "http.store_timeout", "leave it out for 10s"},
		{"negative retry_after", `[http]`, "[http]\nretry_after = \"-1s\"", "http.retry_after", "leave it out for 5s"},
		{"negative poll_interval", `[http]`, "[worker]\npoll_interval = \"-1s\"\n[http]", "worker.poll_interval", "leave it out for 1s"},
		{"negative shutdown_grace", `[http]`, "[worker]\nshutdown_grace = \"-1s\"\n[http]", "worker.shutdown_grace", "leave it out for 10s"},
		{"negative retry_base", `[http]`, "[worker]\nretry_base = \"-1s\"\n[http]", "worker.retry_base", "positive duration"},
		{"negative retry_cap", `[http]`, "[worker]\nretry_cap = \"-1h\"\n[http]", "worker.retry_cap", "positive duration"},
		{"empty forward secret", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\nsecret = \"whsec_\"", "source[0] (stripe).forward.secret", "no key"},
		{"a bad forward secret in a roll", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\nsecrets = [\"whsec_bmV3\", \"whsec_\"]", "source[0] (stripe).forward.secrets[1]", "no key"},
		{"a bad forward secret beside secrets", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\nsecret = \"whsec_b2xk\"\nsecrets = [\"whsec_\"]", "source[0] (stripe).forward.secrets[0]: is not a Standard Webhooks secret", "no key"},
		{"forward secret and secrets", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\nsecret = \"whsec_b2xk\"\nsecrets = [\"whsec_bmV3\"]", "source[0] (stripe).forward.secrets: is set beside forward.secret", "keep one"},
		{"negative forward timeout", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\ntimeout = \"-5s\"", "source[0] (stripe).forward.timeout", "leave it out for 10s"},
		{"bad lost_lease", `replay_window = "72h"`, `replay_window = "72h"` + "\nlost_lease = \"drop\"", "lost_lease", `"hold"`},
		{"max_attempts past 32 bits", `replay_window = "72h"`, `replay_window = "72h"` + "\nmax_attempts = 3000000000", "max_attempts", "from 1 to 2147483647"},
		{"a secret not in a list", `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secrets = "whsec_SEKRET"`, `"source.secrets"`, `write it as a list: ["..."]`},
		{"a quoted boolean", `replay_window = "72h"`, `replay_window = "72h"` + "\ndetect_replays = \"false\"", `"source.detect_replays"`, "write true or false without quotes"},
		{"a number from the environment", `replay_window = "72h"`, `replay_window = "72h"` + "\nmax_body = \"${MAXB}\"", `"source.max_body"`, "write a bare number, without quotes (${NAME} works only in strings, durations and lists)"},
		{"a fraction for a count", `[http]`, "[http]\nmax_in_flight = 1.5", `"http.max_in_flight"`, "write a whole number"},
		{"a number for a string", `listen = "127.0.0.1:8080"`, `listen = 8080`, `"http.listen"`, "put the value in double quotes"},
		{"bad duration", `replay_window = "72h"`, `replay_window = "3 days"`, "", "72h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := strings.Replace(good, tc.edit, tc.from, 1)
			_, err := Parse([]byte(raw), vars)
			wantInvalid(t, err, tc.wantKey, tc.wantFix, "SEKRET")
		})
	}
}

// An unknown key a letter or two from one of its table's keys is shown
// with that key; one far from every key, alone.
func TestParseSuggestsTheKeyAMisspellingMeant(t *testing.T) {
	t.Parallel()
	raw := strings.Replace(good, `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secret = ["${STRIPE_WEBHOOK_SECRET}"]`, 1)
	raw = strings.Replace(raw, "[http]", "[worker]\nretry_cpa = \"1m\"\n[http]\nlisten_addr = \"x\"", 1)
	_, err := Parse([]byte(raw), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
	wantInvalid(t, err, "unknown key worker.retry_cpa (retry_cap?), http.listen_addr, source.secret (secrets?): check its spelling", "", "")
}

// A misspelled table is one unknown key, named once, however many sources
// have it and whatever it holds.
func TestParseNamesAnUnknownTableOnce(t *testing.T) {
	t.Parallel()
	second := "[[source]]\nname = \"github\"\nprovider = \"github\"\nsecrets = [\"s\"]\n[source.foward]\nurl = \"http://127.0.0.1:3000/\"\n"
	raw := strings.Replace(good, "[source.forward]", "[source.foward]", 1) + second
	_, err := Parse([]byte(raw), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
	wantInvalid(t, err, "unknown key source.foward (forward?): check its spelling", "", "")
	if n := strings.Count(err.Error(), "source.foward"); n != 1 {
		t.Errorf("err = %v: names source.foward %d times, want once", err, n)
	}
}

// store.url's value is never echoed when its scheme is unknown: a
// keyword/value DSN or a URL missing its "//" holds its password where no
// redaction finds it.
func TestParseUnknownStoreSchemeIsNotEchoed(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"host=db user=ferry password=SEKRET dbname=ferry", "postgres:SEKRET@db/ferry"} {
		raw := strings.Replace(good, `url = "sqlite:ferry.db"`, fmt.Sprintf("url = %q", url), 1)
		_, err := Parse([]byte(raw), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
		wantInvalid(t, err, "store.url: neither", "postgres://", "SEK")
	}
}

// An override (a command-line flag) is checked as the key it sets.
func TestParseChecksOverrides(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	listen := func(addr string) func(*Config) { return func(c *Config) { c.HTTP.Listen = addr } }
	_, err := Parse([]byte(good), vars, listen("nohost"))
	wantInvalid(t, err, "http.listen", "host:port", "")
	_, err = Parse([]byte(good), vars, listen(DefaultAdminListen))
	wantInvalid(t, err, "admin.listen", "is also http.listen", "")
	c, err := Parse([]byte(good), vars, listen("127.0.0.1:9090"))
	if err != nil {
		t.Fatalf("a good override: %v", err)
	}
	if c.HTTP.Listen != "127.0.0.1:9090" {
		t.Errorf("a good override: listen %q, want 127.0.0.1:9090", c.HTTP.Listen)
	}
}

// A lease_ttl too short is reported alone: not with a heartbeat bound
// derived from it, about a heartbeat the file may not set.
func TestParseBadLeaseTTLAlone(t *testing.T) {
	t.Parallel()
	for _, ttl := range []string{"-15s", "500ms"} {
		raw := strings.Replace(good, "[http]", "[worker]\nlease_ttl = \""+ttl+"\"\n[http]", 1)
		_, err := Parse([]byte(raw), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
		wantInvalid(t, err, "worker.lease_ttl: is "+ttl, "use at least 1s", "")
		if strings.Contains(err.Error(), "heartbeat") {
			t.Errorf("lease_ttl %s: %v: want nothing about the heartbeat", ttl, err)
		}
	}
}

// wantInvalid checks that err stops the start: ErrInvalid, naming key and
// the fix, and never secret (when not "").
func wantInvalid(t *testing.T, err error, key, fix, secret string) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), fix) {
		t.Errorf("err = %v, want the key %q and the fix %q", err, key, fix)
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Errorf("err = %v: the secret %q reached the message", err, secret)
	}
}

// A URL in an error or a log line keeps where it points and loses what may
// be a credential.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:3000/hook":                      "http://127.0.0.1:3000/hook",
		"https://app.internal/hook?token=SEKRET":          "https://app.internal/hook?…",
		"https://app.internal/hook#SEKRET":                "https://app.internal/hook",
		"postgres://ferry:SEKRET@db/ferry?sslmode=verify": "postgres://ferry:xxxxx@db/ferry?…",
		"https://sk_live_SEKRET@api.stripe.com":           "https://xxxxx@api.stripe.com",
		"https://sk_live_SEKRET:@api.stripe.com":          "https://xxxxx@api.stripe.com",
		"https://ghp_SEKRET:x-oauth-basic@github.com":     "https://xxxxx@github.com",
		"https//app.internal/hook?token=SEKRET":           "https//app.internal/hook?…",
		"http://[::1/hook?token=SEKRET":                   "(unparseable)",
		"https//u:SEKRET@app.internal/x":                  "https//xxxxx@app.internal/x",
		"http//u:SEKRET@collector:4318":                   "http//xxxxx@collector:4318",
		"https//u:SE@KRET@app.internal/x@y":               "https//xxxxx@y",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Replay detection is on by default where the signature leaves the id
// unauthenticated, off where it covers it, and a source can turn it off.
func TestParseDetectReplays(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, source string // the source's table after its name
		want         time.Duration
	}{
		{"stripe", `provider = "stripe"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]`, 0},
		{"swh", `provider = "standardwebhooks"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]`, 0},
		{"github", `provider = "github"
secrets = ["s"]
replay_window = "24h"`, 24 * time.Hour},
		{"shopify", `provider = "shopify"
secrets = ["s"]`, 72 * time.Hour},
		{"hmac", `provider = "hmac"
secrets = ["s"]
[source.hmac]
header = "X-Sig"
event_id_header = "X-Id"`, 72 * time.Hour},
		{"hmac-signed-id", `provider = "hmac"
secrets = ["s"]
[source.hmac]
header = "X-Sig"
mode = "id.timestamp.body"
timestamp_header = "X-Time"
event_id_header = "X-Id"`, 0},
		{"github-repeats", `provider = "github"
secrets = ["s"]
detect_replays = false`, 0},
	}
	raw := "[store]\nurl = \"sqlite:ferry.db\"\n"
	want := make(map[string]time.Duration, len(cases))
	for _, tc := range cases {
		raw += fmt.Sprintf("[[source]]\nname = %q\n%s\n", tc.name, tc.source)
		want[tc.name] = tc.want
	}
	c, err := Parse([]byte(raw), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sources) != len(cases) {
		t.Fatalf("%d sources parsed, want %d", len(c.Sources), len(cases))
	}
	for _, s := range c.Sources {
		if got := s.ReceiveReplayWindow(); got != want[s.Name] {
			t.Errorf("%s: replay detection window %v, want %v", s.Name, got, want[s.Name])
		}
	}
}

// Every duration key refuses a negative value alone: one line naming the
// key and the fix, not a rule comparing it with another key, nor the
// provider's complaint without the key.
func TestParseRejectsEveryNegativeDuration(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	raw := good + "[source.catchup]\n" + stripeKey + "\n[alerts]\nat_risk_margin = \"1h\"\n" // catch-up on and a margin set: the rules that compare durations run
	var keys []string
	eachDuration(reflect.ValueOf(&Config{Sources: make([]Source, 1)}).Elem(), "", func(key string, _ *Duration) {
		keys = append(keys, key)
	})
	for _, want := range []string{"http.store_timeout", "worker.heartbeat", "source[0].tolerance", "source[0].replay_window", "source[0].retention", "source[0].catchup.interval", "alerts.at_risk_margin"} {
		if !slices.Contains(keys, want) {
			t.Fatalf("durations found: %v; want %s among them", keys, want)
		}
	}
	for i, key := range keys {
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			negative := func(c *Config) {
				n := 0
				eachDuration(reflect.ValueOf(c).Elem(), "", func(_ string, d *Duration) {
					if n == i {
						d.Duration = -time.Hour
					}
					n++
				})
			}
			_, err := Parse([]byte(raw), vars, negative)
			named := strings.Replace(key, "source[0]", "source[0] (stripe)", 1) + ": is -1h0m0s: use "
			wantInvalid(t, err, named, "", "")
			if lines := strings.Count(err.Error(), "\n  "); lines != 1 {
				t.Errorf("%d lines, want the key's alone:\n%v", lines, err)
			}
		})
	}
}

// eachDuration calls fn with each Duration under v and its key, allocating
// a nil *Duration so it can be set.
func eachDuration(v reflect.Value, key string, fn func(key string, d *Duration)) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem() == reflect.TypeFor[Duration]() {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			fn(key, v.Interface().(*Duration))
		}
	case reflect.Slice:
		for i := range v.Len() {
			eachDuration(v.Index(i), fmt.Sprintf("%s[%d]", key, i), fn)
		}
	case reflect.Struct:
		if d, ok := v.Addr().Interface().(*Duration); ok {
			fn(key, d)
			return
		}
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ",")
			if name == "" {
				continue
			}
			if key != "" {
				name = key + "." + name
			}
			eachDuration(v.Field(i), name, fn)
		}
	}
}

// A provider's refusal of a source's options names the config's keys, not
// the provider's Go fields, and [source.hmac] is refused where no HMAC
// verifier reads it.
func TestParseProviderOptionsNameKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, source, want string }{
		{"no header", "provider = \"hmac\"\n[source.hmac]\nevent_id_header = \"X-Id\"", "source[0] (s).hmac: header is required"},
		{"two ids", "provider = \"hmac\"\n[source.hmac]\nheader = \"X-Sig\"\nevent_id_header = \"X-Id\"\nevent_id_field = \"id\"", "source[0] (s).hmac: set exactly one of event_id_header and event_id_field"},
		{"signed id from the body", "provider = \"hmac\"\n[source.hmac]\nheader = \"X-Sig\"\nmode = \"id.timestamp.body\"\nevent_id_field = \"id\"", "needs event_id_header and timestamp_header"},
		{"header not a token", "provider = \"hmac\"\n[source.hmac]\nheader = \"X Sig\"\nevent_id_header = \"X-Id\"", `source[0] (s).hmac: header "X Sig" is not an HTTP header name`},
		{"id header not a token", "provider = \"hmac\"\n[source.hmac]\nheader = \"X-Sig\"\nevent_id_header = \"X:Id\"", `source[0] (s).hmac: event_id_header "X:Id" is not an HTTP header name`},
		{"bad mode", "provider = \"hmac\"\n[source.hmac]\nheader = \"X-Sig\"\nevent_id_header = \"X-Id\"\nmode = \"all\"", `source[0] (s).hmac: mode "all" (valid: body, id.timestamp.body)`},
		{"hmac table on stripe", "provider = \"stripe\"\n[source.hmac]\nheader = \"X-Sig\"", `source[0] (s).hmac: is set, but provider is "stripe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := "[store]\nurl = \"sqlite:ferry.db\"\n[[source]]\nname = \"s\"\nsecrets = [\"whsec_x\"]\n" + tc.source + "\n"
			_, err := Parse([]byte(raw), env(nil))
			wantInvalid(t, err, tc.want, "", "")
			if strings.Contains(err.Error(), "HMAC.") || strings.Contains(err.Error(), "invalid options") {
				t.Errorf("err = %v: want the config's keys, not the provider's fields", err)
			}
		})
	}
}

// A source's tolerance reaches its verifier: a Stripe delivery signed 7m
// ago verifies under tolerance = "10m", and is stale under the default.
func TestToleranceReachesTheVerifier(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"t"}`)
	header := ferrytest.SignStripe("whsec_x", body, time.Now().Add(-7*time.Minute))
	for _, tc := range []struct {
		key  string
		want error
	}{{"\ntolerance = \"10m\"", nil}, {"", ferry.ErrStaleTimestamp}} {
		c, err := Parse([]byte(strings.Replace(good, `replay_window = "72h"`, `replay_window = "72h"`+tc.key, 1)), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
		if err != nil {
			t.Fatal(err)
		}
		v, err := provider.New(c.Sources[0].Provider, c.Sources[0].ProviderOptions())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(header, body); !errors.Is(err, tc.want) {
			t.Errorf("config %q: Verify of a delivery signed 7m ago = %v, want %v", tc.key, err, tc.want)
		}
	}
}

// Every field a provider's HMAC error may name has its [source.hmac] key.
func TestHMACKeysCoverProviderFields(t *testing.T) {
	t.Parallel()
	fields := reflect.TypeFor[provider.HMACOptions]()
	for i := range fields.NumField() {
		if hmacKeys[fields.Field(i).Name] == "" {
			t.Errorf("provider.HMACOptions.%s has no [source.hmac] key: add it to HMAC", fields.Field(i).Name)
		}
	}
}

// A line the parser cannot read is named by line and key, never by the
// text the parser quotes or names: an unquoted value may be a secret.
func TestParseErrorHidesTheText(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ raw, secret string }{
		"unquoted token":  {good + "[admin]\ntoken = TOPSECRETtoken9abcdef\n", "TOPSECRET"},
		"unquoted secret": {strings.Replace(good, `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secrets = [TOPSECRET]`, 1), "TOPSECRET"},
		"bad duration":    {strings.Replace(good, `replay_window = "72h"`, `replay_window = "TOPSECRET"`, 1), "TOPSECRET"},
		// Numbers out of range, which the parser names unquoted.
		"numeric password": {good + "[admin]\nuser = \"ops\"\npassword = 9876543210987654321098\n", "987654"},
		"hex token":        {good + "[admin]\ntoken = 0x9876543210abcdef98\n", "9876543210"},
		"float token":      {good + "[admin]\ntoken = 9876e400\n", "9876"},
		"numeric secret":   {strings.Replace(good, `secrets = ["${STRIPE_WEBHOOK_SECRET}"]`, `secrets = [98765432109876543210987]`, 1), "987654"},
		// A byte-order mark, which the parser reads over (Notepad writes one).
		"numeric token after a BOM": {"\ufeff" + good + "[admin]\ntoken = 98765432109876543210987\n", "987654"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.raw), env(nil))
			wantInvalid(t, err, "line ", "", tc.secret)
			if !strings.Contains(err.Error(), "key admin.") && !strings.Contains(err.Error(), "key source.") {
				t.Errorf("err = %v, want the key", err)
			}
		})
	}
}

// What hides a value leaves the rest of the parser's message as it is: a
// key defined twice is named.
func TestParseErrorKeepsTheKeyName(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(good+"[admin]\ntoken = \"${FERRY_ADMIN_TOKEN}\"\ntoken = \"${FERRY_ADMIN_TOKEN}\"\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "Key 'admin.token' has already been defined.") || strings.Contains(err.Error(), "not shown") {
		t.Errorf("err = %v, want the key named twice and nothing hidden", err)
	}
}

// A URL with credentials where a URL cannot be is refused with them masked,
// whatever key holds it.
func TestParseMasksCredentialsInBadURLs(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	for _, tc := range []struct{ name, edit, from, wantKey string }{
		{"forward.url missing its colon", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "https//u:SEKRET@app.internal/x"`, "source[0] (stripe).forward.url"},
		{"otlp_endpoint missing its colon", "\n[[source]]", "\n[telemetry]\notlp_endpoint = \"http//u:SEKRET@collector:4318\"\n[[source]]", "telemetry.otlp_endpoint"},
		{"admin.public_url not http", "\n[[source]]", "\n[admin]\npublic_url = \"ftp://admin:SEKRET@ferry.example.com\"\n[[source]]", "admin.public_url"},
		{"catchup.api_base with credentials", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\n[source.catchup]\napi_key = \"k\"\ntypes = [\"*\"]\napi_base = \"https://u:SEKRET@api.stripe.com\"", "source[0] (stripe).catchup.api_base: holds credentials"},
		{"catchup.api_base not http", `url = "http://127.0.0.1:3000/webhooks/stripe"`, `url = "http://127.0.0.1:3000/webhooks/stripe"` + "\n[source.catchup]\napi_key = \"k\"\ntypes = [\"*\"]\napi_base = \"ftp://u:SEKRET@x\"", "source[0] (stripe).catchup.api_base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := strings.Replace(good, tc.edit, tc.from, 1)
			_, err := Parse([]byte(raw), vars)
			wantInvalid(t, err, tc.wantKey, "http", "SEKRET")
		})
	}
}

// A URL that does not parse is not shown, whatever key holds it, and the
// error says so and how to write it: a quoted "(unparseable)" in its place
// read as the value itself.
func TestParseRefusesAnUnreadableURL(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	fwd := `url = "http://127.0.0.1:3000/webhooks/stripe"`
	for _, value := range []struct{ text, want string }{
		{"127.0.0.1:18300/webhooks/stripe?token=SEKRET", ": cannot be read as a URL: it needs http:// or https:// in front"},
		{"http://[::1/webhooks/stripe?token=SEKRET", ": cannot be read as a URL (the value is not shown"},
	} {
		for _, tc := range []struct{ name, edit, from, wantKey string }{
			{"forward.url", fwd, `url = "VALUE"`, "source[0] (stripe).forward.url"},
			{"otlp_endpoint", "\n[[source]]", "\n[telemetry]\notlp_endpoint = \"VALUE\"\n[[source]]", "telemetry.otlp_endpoint"},
			{"admin.public_url", "\n[[source]]", "\n[admin]\npublic_url = \"VALUE\"\n[[source]]", "admin.public_url"},
			{"catchup.api_base", fwd, fwd + "\n[source.catchup]\napi_key = \"k\"\ntypes = [\"*\"]\napi_base = \"VALUE\"", "source[0] (stripe).catchup.api_base"},
		} {
			t.Run(tc.name+"/"+value.text, func(t *testing.T) {
				t.Parallel()
				raw := strings.Replace(good, tc.edit, strings.ReplaceAll(tc.from, "VALUE", value.text), 1)
				_, err := Parse([]byte(raw), vars)
				wantInvalid(t, err, tc.wantKey+value.want, "write it like", "SEKRET")
				if strings.Contains(err.Error(), "unparseable") {
					t.Errorf("err = %v: want it worded, not a placeholder in quotes", err)
				}
			})
		}
	}
}

// A credential no sender or client can match is refused by key, without
// its value: whitespace at either end (a trailing newline from a file or a
// variable), or a whole $NAME, which reads as a variable but is kept as
// written, so the secret would be the text "$STRIPE_WEBHOOK_SECRET".
func TestParseRejectsUnmatchableCredentials(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "PADDED": "SEKRET0123456789abcdef\n"})
	fwd := `url = "http://127.0.0.1:3000/webhooks/stripe"`
	for _, value := range []struct{ text, want, fix string }{
		{"${PADDED}", ": starts or ends with whitespace", "remove the surrounding whitespace"},
		{" whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", ": starts or ends with whitespace", "remove the surrounding whitespace"},
		{"$SEKRET_TOKEN", ": is a $NAME, which ferry keeps as written", "write ${NAME} to read it"},
	} {
		bare := value.text == "$SEKRET_TOKEN"
		for _, tc := range []struct{ name, edit, from, wantKey string }{
			{"webhook secret", `"${STRIPE_WEBHOOK_SECRET}"`, `"VALUE"`, "source[0] (stripe).secrets[0]"},
			{"forward secret", fwd, fwd + "\nsecret = \"VALUE\"", "source[0] (stripe).forward.secret"},
			{"forward secrets", fwd, fwd + "\nsecrets = [\"whsec_bmV3\", \"VALUE\"]", "source[0] (stripe).forward.secrets[1]"},
			{"admin token", "\n[[source]]", "\n[admin]\ntoken = \"VALUE\"\n[[source]]", "admin.token"},
			{"admin password", "\n[[source]]", "\n[admin]\nuser = \"ops\"\npassword = \"VALUE\"\n[[source]]", "admin.password"},
			{"catchup api_key", fwd, fwd + "\n[source.catchup]\napi_key = \"VALUE\"\ntypes = [\"*\"]", "source[0] (stripe).catchup.api_key"},
			{"catchup token", fwd, fwd + "\n[source.catchup]\ntoken = \"VALUE\"\nhook = \"app/hook\"", "source[0] (stripe).catchup.token"},
			// A PEM key and a URL are not exact: only a whole $NAME is refused.
			{"catchup private_key", fwd, fwd + "\n[source.catchup]\napp_id = \"1\"\nprivate_key = \"VALUE\"\ninstallation_id = \"2\"\nhook = \"app/hook\"", "source[0] (stripe).catchup.private_key"},
			{"alerts url", "\n[[source]]", "\n[alerts]\nurl = \"VALUE\"\n[[source]]", "alerts.url"},
			// A database URL holds a password: it is taken from a variable.
			{"store url", `url = "sqlite:ferry.db"`, `url = "VALUE"`, "store.url"},
		} {
			if !bare && (tc.name == "catchup private_key" || strings.HasSuffix(tc.name, " url")) {
				continue
			}
			t.Run(tc.name+"/"+value.text, func(t *testing.T) {
				t.Parallel()
				raw := strings.Replace(good, tc.edit, strings.ReplaceAll(tc.from, "VALUE", value.text), 1)
				if strings.Contains(tc.from, "hook =") {
					raw = strings.Replace(raw, `provider = "stripe"`, `provider = "github"`, 1)
				}
				_, err := Parse([]byte(raw), vars)
				wantInvalid(t, err, tc.wantKey+value.want, value.fix, "SEKRET")
				// Its other check would only repeat the mistake.
				if n := strings.Count(err.Error(), tc.wantKey+":"); tc.name == "store url" && n != 1 {
					t.Errorf("err = %v: %d lines about %s, want the one that says how to write it", err, n, tc.wantKey)
				}
			})
		}
	}
}

// A $NAME is judged as written: a ${NAME} whose value looks like one is
// the secret.
func TestParseTakesASecretThatStartsWithADollar(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "$ecretPassw0rd", "TOKEN": "$Kx9fQ2abcdefghijklmnop"})
	raw := strings.Replace(good, "\n[[source]]", "\n[admin]\ntoken = \"${TOKEN}\"\n[[source]]", 1)
	c, err := Parse([]byte(raw), vars)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sources[0].Secrets[0] != "$ecretPassw0rd" || c.Admin.Token != "$Kx9fQ2abcdefghijklmnop" {
		t.Errorf("secrets %q, admin.token %q: want the variables' values", c.Sources[0].Secrets, c.Admin.Token)
	}
}

// A key written as zero that ferry would take for its default is refused,
// naming the key and the default; a zero that is the default, or off, is
// kept.
func TestParseRejectsZeroThatMeansTheDefault(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	for _, tc := range []struct{ name, edit, key, def string }{
		{"ShutdownGrace", "[worker]\nshutdown_grace = \"0s\"", "worker.shutdown_grace", "10s"},
		{"Workers", "[worker]\nworkers = 0", "worker.workers", "128"},
		{"StoreTimeout", "[http]\nlisten = \"127.0.0.1:8080\"\nstore_timeout = \"0s\"", "http.store_timeout", "10s"},
		{"MaxAttempts", "max_attempts = 0", "source[0] (stripe).max_attempts", "25"},
		{"LostLease", "lost_lease = \"\"", "source[0] (stripe).lost_lease", `"retry"`},
		{"ForwardTimeout", "[source.forward]\nurl = \"http://127.0.0.1:3000/\"\ntimeout = \"0s\"", "source[0] (stripe).forward.timeout", "10s"},
		{"AtRiskMargin", "[alerts]\nat_risk_margin = \"0s\"", "alerts.at_risk_margin", "the source's replay_window / 6"},
		{"Tolerance", "tolerance = \"0s\"", "source[0] (stripe).tolerance", "5m0s"},
		{"RetryCap", "[worker]\nretry_cap = \"0s\"", "worker.retry_cap", "1h0m0s"},
		{"SessionTTL", "[admin]\nsession_ttl = \"0s\"", "admin.session_ttl", "12h0m0s"},
		// "" is a zero duration, as docs/configuration.md says, not "not a duration".
		{"RetryBaseEmpty", "[worker]\nretry_base = \"\"", "worker.retry_base", "1s"},
		{"StoreTimeoutEmpty", "[http]\nlisten = \"127.0.0.1:8080\"\nstore_timeout = \"\"", "http.store_timeout", "10s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(zeroConfig(tc.edit)), vars)
			wantInvalid(t, err, tc.key+": is written as zero, which means the default, "+tc.def+": leave the key out", "", "")
		})
	}
	// The second source's zero is named as the second source's.
	raw := zeroConfig("") + "[[source]]\nname = \"github\"\nprovider = \"github\"\nsecrets = [\"s\"]\nmax_attempts = 0\n[source.forward]\nurl = \"http://127.0.0.1:3000/\"\n"
	_, err := Parse([]byte(raw), vars)
	wantInvalid(t, err, "source[1] (github).max_attempts: is written as zero", "", "")
	if strings.Contains(err.Error(), "source[0]") {
		t.Errorf("err = %v, names the first source", err)
	}
	for name, edit := range map[string]string{
		"ShutdownDelay":    "[http]\nshutdown_delay = \"0s\"",
		"CatchupOff":       "[source.catchup]\n" + stripeKey + "\ninterval = \"0\"",
		"SamplingRatio":    "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nsampling_ratio = 0.0",
		"DetectReplaysOff": "detect_replays = false",
	} {
		if _, err := Parse([]byte(zeroConfig(edit)), vars); err != nil {
			t.Errorf("%s: a zero that is the default or off was refused: %v", name, err)
		}
	}
}

// One start names every mistake in the file, whatever kind: an unknown key,
// a zero that means the default, and bad values, each on a line.
func TestParseListsEveryMistakeAtOnce(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	_, err := Parse([]byte(zeroConfig("bogus = 1\nmax_attempts = 0\nmax_body = -1\n[worker]\nlease_ttl = \"-1s\"")), vars)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{"unknown key source.bogus", "source[0] (stripe).max_attempts: is written as zero", "source[0] (stripe).max_body", "worker.lease_ttl"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %q among the lines", err, want)
		}
	}
	// A reference that does not expand stops the checks of values, not
	// the unknown keys found before it.
	_, err = Parse([]byte(zeroConfig("bogus = 1")), env(map[string]string{}))
	for _, want := range []string{"unknown key source.bogus", "STRIPE_WEBHOOK_SECRET"} {
		if !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("with a variable unset: err = %v\nwant %q among the lines", err, want)
		}
	}
}

// zeroConfig is a one-source config with edit in place: keys of the source
// itself, or tables that follow it.
func zeroConfig(edit string) string {
	return `
[store]
url = "sqlite:ferry.db"
[[source]]
name = "stripe"
provider = "stripe"
secrets = ["${STRIPE_WEBHOOK_SECRET}"]
` + edit + `
`
}
