package config

import (
	"strings"
	"testing"
	"time"
)

func TestOperatorDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(good), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
	if err != nil {
		t.Fatal(err)
	}
	if !*c.UI.Enabled || !*c.Metrics.Enabled || c.Metrics.Cache.Duration != DefaultMetricsCache || c.Alerts.CheckInterval.Duration != DefaultAlertCheckInterval ||
		c.Alerts.Interval.Duration != DefaultAlertInterval || c.Alerts.URL != "" {
		t.Errorf("operator defaults: ui %+v metrics %+v alerts %+v", c.UI, c.Metrics, c.Alerts)
	}
	if got := c.AtRiskAfter()["stripe"]; got != 60*time.Hour {
		t.Errorf("at risk after = %v, want 72h - 72h/6 = 60h", got)
	}
}

func TestOperatorRejects(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "EMPTY": ""})
	for _, tc := range []struct{ name, extra, wantKey, wantFix string }{
		{"admin off loopback without credentials", "[admin]\nlisten = \"0.0.0.0:8081\"\n", "admin.listen", `admin.token = "${FERRY_ADMIN_TOKEN}"`},
		{"admin on every address without credentials", "[admin]\nlisten = \":8081\"\n", "admin.listen", "not a loopback address"},
		{"admin on a name without credentials", "[admin]\nlisten = \"ferry.internal:8081\"\n", "admin.listen", "or listen on 127.0.0.1:8081"},
		{"admin on another port without credentials", "[admin]\nlisten = \"0.0.0.0:18081\"\n", "admin.listen", "or listen on 127.0.0.1:18081"},
		{"admin shares the public listener", "[admin]\nlisten = \"127.0.0.1:8080\"\n", "admin.listen", "a listener of its own"},
		{"admin listen not host:port", "[admin]\nlisten = \"8081\"\n", "admin.listen", "not host:port"},
		{"admin on localhost at the public port", "[admin]\nlisten = \"localhost:8080\"\n", "admin.listen", "a listener of its own"},
		{"admin everywhere at the public port", "[admin]\nlisten = \":8080\"\ntoken = \"0123456789abcdef0\"\n", "admin.listen", "a listener of its own"},
		{"admin port past 65535", "[admin]\nlisten = \"127.0.0.1:99999\"\n", "admin.listen", "no port from 0 to 65535"},
		{"user without password", "[admin]\nuser = \"ops\"\n", "admin.password", "set both"},
		{"user with a colon", "[admin]\nuser = \"ops:team\"\npassword = \"pw\"\n", "admin.user", "without one"},
		{"token from unset env", "[admin]\nlisten = \"0.0.0.0:8081\"\ntoken = \"${MISSING_TOKEN}\"\n", "admin.token", "export it"},
		{"public url not a url", "[admin]\npublic_url = \"ferry-admin\"\n", "admin.public_url", "https://ferry-admin.example.com"},
		{"public url off host without credentials", "[admin]\npublic_url = \"https://ferry-admin.example.com\"\n", "admin.public_url", `admin.token = "${FERRY_ADMIN_TOKEN}"`},
		{"public url on an address without credentials", "[admin]\npublic_url = \"http://10.0.0.5:8081\"\n", "admin.public_url", "not on this host"},
		{"short token off loopback", "[admin]\nlisten = \"0.0.0.0:8081\"\ntoken = \"xoxsecret\"\n", "admin.token", "shorter than 16 characters"},
		{"short password behind a public url", "[admin]\npublic_url = \"https://ferry-admin.example.com\"\nuser = \"ops\"\npassword = \"xoxsecret\"\n", "admin.password", "openssl rand -hex 16"},
		{"session ttl too short", "[admin]\nsession_ttl = \"5s\"\n", "admin.session_ttl", "at least 1m"},
		{"ui.token moved", "[ui]\ntoken = \"x\"\n", "ui.token", "admin.token"},
		{"ui.user moved", "[ui]\nuser = \"ops\"\npassword = \"pw\"\n", "ui.password", "admin.password"},
		{"margin past window", "[alerts]\nat_risk_margin = \"80h\"\n", "alerts.at_risk_margin", "shorter than"},
		{"alerts url not http", "[alerts]\nurl = \"ftp://hooks.example/T0/B0/xoxsecret\"\n", "alerts.url", `"${FERRY_ALERTS_URL}"`},
		{"alerts url without host", "[alerts]\nurl = \"https:///services/xoxsecret\"\n", "alerts.url", "not an http(s) URL"},
		{"alerts url from unset env", "[alerts]\nurl = \"${FERRY_ALERTS_URL}\"\n", "alerts.url", "export it"},
		{"alerts interval negative", "[alerts]\ninterval = \"-1m\"\n", "alerts.interval", `positive duration like "10m"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(good+tc.extra), vars)
			wantInvalid(t, err, tc.wantKey, tc.wantFix, "xoxsecret") // the alerts URL is a secret
		})
	}
}

func TestOperatorAccepts(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "TOKEN": "s3cret-0123456789ab"})
	public := strings.Replace(good, "127.0.0.1:8080", "0.0.0.0:8080", 1)
	for name, raw := range map[string]string{
		"public receiver, loopback admin": public,
		"admin off loopback with token":   public + "[admin]\nlisten = \"0.0.0.0:8081\"\ntoken = \"${TOKEN}\"\n",
		"admin off loopback with basic":   public + "[admin]\nlisten = \"10.0.0.5:8081\"\nuser = \"ops\"\npassword = \"${TOKEN}\"\n",
		"admin off loopback, nothing on":  public + "[admin]\nlisten = \":8081\"\n[ui]\nenabled = false\n[metrics]\nenabled = false\n",
		"admin on localhost":              good + "[admin]\nlisten = \"localhost:8081\"\n",
		"short token on loopback":         good + "[admin]\ntoken = \"s3cret\"\n",
		"admin on ipv6 loopback":          good + "[admin]\nlisten = \"[::1]:8081\"\n",
		"one port on two hosts":           strings.Replace(good, "127.0.0.1:8080", "10.0.0.5:8080", 1) + "[admin]\nlisten = \"127.0.0.1:8080\"\n",
		"one port on two loopbacks":       good + "[admin]\nlisten = \"127.0.0.2:8080\"\n",
		"one port on ipv4 and ipv6":       good + "[admin]\nlisten = \"[::1]:8080\"\n",
		"both on port 0":                  strings.Replace(good, "127.0.0.1:8080", "127.0.0.1:0", 1) + "[admin]\nlisten = \"127.0.0.1:0\"\n",
		"https public url with token":     good + "[admin]\npublic_url = \"https://ferry-admin.example.com\"\ntoken = \"${TOKEN}\"\n",
		"loopback public url":             good + "[admin]\npublic_url = \"http://[::1]:8081\"\n",
		"public url, no admin listener":   good + "[admin]\npublic_url = \"https://ferry-admin.example.com\"\n[ui]\nenabled = false\n[metrics]\nenabled = false\n",
		"margin below window":             good + "[alerts]\nat_risk_margin = \"24h\"\n",
		"alerts url from env":             good + "[alerts]\nurl = \"https://hooks.slack.com/services/${TOKEN}\"\n",
		"alerts to slack":                 good + "[alerts]\nurl = \"https://hooks.slack.com/services/T0/B0/x\"\ninterval = \"1m\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := Parse([]byte(raw), vars); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAdminDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(good), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Listen != "127.0.0.1:8081" || c.Admin.TokenName != "token" || c.Admin.SessionTTL.Duration != 12*time.Hour || c.AdminAuth() {
		t.Errorf("admin defaults: %+v", c.Admin)
	}
}

// TestAdminCleartext: serve warns at start when the admin listener is
// reachable from other hosts and no https URL says TLS stands in front.
func TestAdminCleartext(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "TOKEN": "s3cret-0123456789ab"})
	for name, tc := range map[string]struct {
		admin string
		want  bool
	}{
		"loopback":                         {"", false},
		"off loopback, no public url":      {"listen = \"0.0.0.0:8081\"\ntoken = \"${TOKEN}\"\n", true},
		"off loopback, http public url":    {"listen = \"0.0.0.0:8081\"\npublic_url = \"http://ferry-admin.example.com\"\ntoken = \"${TOKEN}\"\n", true},
		"off loopback, https public url":   {"listen = \"0.0.0.0:8081\"\npublic_url = \"https://ferry-admin.example.com\"\ntoken = \"${TOKEN}\"\n", false},
		"loopback behind an http proxy":    {"public_url = \"http://ferry-admin.example.com\"\ntoken = \"${TOKEN}\"\n", true},
		"loopback behind an https proxy":   {"public_url = \"https://ferry-admin.example.com\"\ntoken = \"${TOKEN}\"\n", false},
		"off loopback, nothing served":     {"listen = \":8081\"\n[ui]\nenabled = false\n[metrics]\nenabled = false\n", false},
		"loopback public url, not exposed": {"public_url = \"http://127.0.0.1:8081\"\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(good+"[admin]\n"+tc.admin), vars)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.AdminCleartext(); got != tc.want {
				t.Errorf("AdminCleartext() = %v, want %v", got, tc.want)
			}
		})
	}
}

// An http.listen a flag set is named as the flag's in its errors, and the
// fix for a clash with admin.listen never suggests the address taken.
func TestParseNamesTheListenFlag(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"})
	_, err := Parse([]byte(good), vars, ListenFlag("--listen", "127.0.0.1:8081"))
	wantInvalid(t, err, "admin.listen: 127.0.0.1:8081 is also http.listen (127.0.0.1:8081, from --listen)", "; give --listen or admin.listen another port", "")
	_, err = Parse([]byte(good), vars, ListenFlag("--listen", "nohost"))
	wantInvalid(t, err, `http.listen (from --listen): "nohost" is not host:port`, "", "")
	_, err = Parse([]byte(strings.Replace(good, `listen = "127.0.0.1:8080"`, `listen = "127.0.0.1:8081"`, 1)), vars)
	wantInvalid(t, err, "admin.listen: 127.0.0.1:8081 is also http.listen (127.0.0.1:8081)", "; give http.listen or admin.listen another port", "")
}
