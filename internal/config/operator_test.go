package config

import (
	"errors"
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
	if !*c.UI.Enabled || !*c.Metrics.Enabled || c.Metrics.Cache.Duration != DefaultMetricsCache || c.Alerts.CheckInterval.Duration != DefaultAlertCheckInterval {
		t.Errorf("operator defaults: ui %+v metrics %+v alerts %+v", c.UI, c.Metrics, c.Alerts)
	}
	if got := c.AtRiskAfter()["stripe"]; got != 60*time.Hour {
		t.Errorf("at risk after = %v, want 72h - 72h/6 = 60h", got)
	}
}

func TestOperatorRejects(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "EMPTY": ""})
	for _, tc := range []struct{ name, listen, extra, wantKey, wantFix string }{
		{"public listen without credentials", "0.0.0.0:8080", "", "ui:", "ui.token"},
		{"user without password", "127.0.0.1:8080", "[ui]\nuser = \"ops\"\n", "ui.password", "set both"},
		{"margin past window", "127.0.0.1:8080", "[alerts]\nat_risk_margin = \"80h\"\n", "alerts.at_risk_margin", "shorter than"},
		{"token from unset env", "0.0.0.0:8080", "[ui]\ntoken = \"${MISSING_TOKEN}\"\n", "ui.token", "export it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := strings.Replace(good, "127.0.0.1:8080", tc.listen, 1) + tc.extra
			_, err := Parse([]byte(raw), vars)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.wantKey) || !strings.Contains(err.Error(), tc.wantFix) {
				t.Errorf("err = %v, want the key %q and the fix %q", err, tc.wantKey, tc.wantFix)
			}
		})
	}
}

func TestOperatorAccepts(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "TOKEN": "s3cret"})
	for name, raw := range map[string]string{
		"public with token":   strings.Replace(good, "127.0.0.1:8080", "0.0.0.0:8080", 1) + "[ui]\ntoken = \"${TOKEN}\"\n",
		"public with ui off":  strings.Replace(good, "127.0.0.1:8080", ":8080", 1) + "[ui]\nenabled = false\n",
		"localhost":           strings.Replace(good, "127.0.0.1:8080", "localhost:8080", 1),
		"ipv6 loopback":       strings.Replace(good, "127.0.0.1:8080", "[::1]:8080", 1),
		"public with basic":   strings.Replace(good, "127.0.0.1:8080", "0.0.0.0:8080", 1) + "[ui]\nuser = \"ops\"\npassword = \"${TOKEN}\"\n",
		"margin below window": good + "[alerts]\nat_risk_margin = \"24h\"\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := Parse([]byte(raw), vars); err != nil {
				t.Fatal(err)
			}
		})
	}
}
