package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/catchup"
)

// stripeKey is a Stripe [source.catchup] table's required keys.
const stripeKey = "api_key = \"k\"\ntypes = [\"*\"]"

func TestCatchup(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x", "STRIPE_API_KEY": "rk_test_abc"})

	t.Run("DefaultsAndExpansion", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(good+"[source.catchup]\napi_key = \"${STRIPE_API_KEY}\"\ntypes = [\"invoice.paid\"]\n"), vars)
		if err != nil {
			t.Fatal(err)
		}
		cu := c.Sources[0].Catchup
		if cu.APIKey != "rk_test_abc" || cu.Interval.Duration != 15*time.Minute || cu.Lookback.Duration != 72*time.Hour || cu.Rate != 5 {
			t.Fatalf("catchup = %+v", cu)
		}
		rec, err := c.Sources[0].Reconciler()
		if _, ok := rec.(*catchup.Stripe); !ok || err != nil {
			t.Fatalf("Reconciler() = %T, %v; want a Stripe reconciler", rec, err)
		}
		if names := c.CatchupSourceNames(); len(names) != 1 || names[0] != "stripe" {
			t.Fatalf("CatchupSourceNames = %v", names)
		}
	})

	t.Run("NoTableNoCatchup", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(good), vars)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := c.Sources[0].Reconciler(); rec != nil || err != nil {
			t.Fatalf("Reconciler() = %v, %v; want none", rec, err)
		}
	})

	// Stripe takes 20 types a call; the reconciler lists more in groups.
	t.Run("MoreThan20Types", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(good+"[source.catchup]\napi_key = \"k\"\ntypes = ["+strings.Repeat(`"a",`, 25)+"]\n"), vars)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := c.Sources[0].Reconciler(); rec == nil || err != nil {
			t.Fatalf("Reconciler() = %v, %v; want a Stripe reconciler", rec, err)
		}
	})

	t.Run("IntervalZeroTurnsTheLoopOff", func(t *testing.T) {
		t.Parallel()
		c, err := Parse([]byte(good+"[source.catchup]\n"+stripeKey+"\ninterval = \"0\"\n"), vars)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sources[0].Catchup.Interval.Duration != 0 {
			t.Fatalf("interval = %v, want 0", c.Sources[0].Catchup.Interval.Duration)
		}
	})

	for _, tc := range []struct {
		name, table, wantKey, wantFix string
	}{
		{"short interval", stripeKey + "\ninterval = \"10s\"", "catchup.interval", "at least 1m"},
		// retention 144h less the 10m overlap and the 2m settle, over 6.
		{"interval past the source's retention", stripeKey + "\ninterval = \"23h58m1s\"", "source[0] (stripe).catchup.interval", "the source's retention is 144h0m0s, less 10m0s for the provider's clock, and an instance that crashes holding the catch-up lease"},
		{"interval past the source's retention names the most", stripeKey + "\ninterval = \"24h\"", "source[0] (stripe).catchup.interval", "use at most 23h58m0s"},
		{"lookback past retention", stripeKey + "\nlookback = \"144h\"", "catchup.lookback", "use at most 143h50m0s"},
		{"rate too high", stripeKey + "\nrate = 100", "catchup.rate", "at most 25"},
		{"rate too low", stripeKey + "\nrate = 0.0000001", "source[0] (stripe).catchup.rate", "at least 0.1"},
		{"negative rate", stripeKey + "\nrate = -1", "catchup.rate", "at least 0.1"},
		{"nan rate", stripeKey + "\nrate = nan", "source[0] (stripe).catchup.rate", "is NaN requests a second: use at least 0.1"},
		{"infinite rate", stripeKey + "\nrate = inf", "source[0] (stripe).catchup.rate", "at most 25"},
		{"no credentials", "hook = \"repos/a/b/hooks/1\"", "catchup.api_key", "credentials"},
		{"only only_failed", "only_failed = true", "source[0] (stripe).catchup.api_key", "missing, but only_failed set"},
		{"only rate", "rate = 2", "source[0] (stripe).catchup.api_key", "missing, but rate set"},
		{"only lookback", "lookback = \"24h\"", "source[0] (stripe).catchup.api_key", "missing, but lookback set"},
		{"only interval", "interval = \"30m\"", "source[0] (stripe).catchup.api_key", "missing, but interval set"},
		{"github keys on stripe", "token = \"t\"\nhook = \"repos/a/b/hooks/1\"", "catchup", "Stripe takes api_key"},
		{"github app keys on stripe", stripeKey + "\nprivate_key = \"k\"\ninstallation_id = \"1\"", "catchup", "Stripe takes api_key"},
		{"no types", "api_key = \"k\"", "source[0] (stripe).catchup.types", "missing: Stripe's events API lists every event of the account"},
		{"star with other types", "api_key = \"k\"\ntypes = [\"*\", \"invoice.paid\"]", "source[0] (stripe).catchup.types", `write ["*"] alone`},
		{"missing env", "api_key = \"${NOPE}\"", "catchup.api_key", "export it"},
		// The form is NewStripe's rule: refused here, the value reached it.
		{"bad api_version", stripeKey + "\napi_version = \"2024-6-20\"", "source[0] (stripe).catchup.api_version", `"2024-6-20" is not a Stripe API version`},
		{"only api_version", "api_version = \"2024-06-20\"", "source[0] (stripe).catchup.api_key", "missing, but api_version set"},
	} {
		t.Run("Rejects/"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(good+"[source.catchup]\n"+tc.table+"\n"), vars)
			wantInvalid(t, err, tc.wantKey, tc.wantFix, "")
		})
	}

	// GitHub keeps deliveries 72h: an interval of 96h, or a little past
	// the sixth of 72h less the settle, could let an event age out before
	// any pass looks at it once an instance crashed holding the lease.
	t.Run("GitHubIntervalWithinItsRetention", func(t *testing.T) {
		t.Parallel()
		raw := strings.Replace(good, `provider = "stripe"`, `provider = "github"`, 1)
		raw = strings.Replace(raw, `replay_window = "72h"`, `replay_window = "72h"`+"\nretention = \"720h\"", 1) + // the provider's 72h binds
			"[source.catchup]\ntoken = \"t\"\nhook = \"repos/a/b/hooks/1\"\ninterval = \"%s\"\n"
		for interval, want := range map[string]string{"96h": "use at most 11h59m40s", "11h59m41s": "the provider keeps events 72h0m0s", "11h59m40s": ""} {
			_, err := Parse(fmt.Appendf(nil, raw, interval), vars)
			if want == "" {
				if err != nil {
					t.Errorf("interval %s: %v", interval, err)
				}
				continue
			}
			wantInvalid(t, err, "source[0] (stripe).catchup.interval", want, "") // the source keeps good's name
		}
	})

	// A token beside the App's keys is refused, not read as the token
	// alone: which one the operator meant is theirs to say. Stripe's keys
	// are refused on a GitHub source.
	for name, tc := range map[string]struct{ keys, want string }{
		"GitHubTokenAndAppKeys": {"private_key = \"k\"\ninstallation_id = \"1\"", "not both"},
		"StripeKeysOnGitHub":    {"api_version = \"2024-06-20\"", "api_version are Stripe's"},
	} {
		t.Run("Rejects/"+name, func(t *testing.T) {
			t.Parallel()
			raw := strings.Replace(good, `provider = "stripe"`, `provider = "github"`, 1) +
				"[source.catchup]\ntoken = \"t\"\nhook = \"repos/a/b/hooks/1\"\n" + tc.keys + "\n"
			_, err := Parse([]byte(raw), vars)
			wantInvalid(t, err, "source[0] (stripe).catchup", tc.want, "")
		})
	}

	t.Run("Rejects/ShopifyHasNoAPI", func(t *testing.T) {
		t.Parallel()
		raw := strings.Replace(good, `provider = "stripe"`, `provider = "shopify"`, 1) + "[source.catchup]\napi_key = \"k\"\n"
		_, err := Parse([]byte(raw), vars)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no API that lists missed deliveries") {
			t.Fatalf("err = %v", err)
		}
	})
}

// A JSON 404 from GitHub names the hook first, then what may not see it:
// the token, or the App's installation and credentials.
func TestCatchupNotFoundKeys(t *testing.T) {
	t.Parallel()
	for want, cu := range map[string]Catchup{
		"source[0] (gh).catchup.hook and source[0] (gh).catchup.token":                                                                              {Token: "t", Hook: "repos/o/r/hooks/1"},
		"source[0] (gh).catchup.hook, source[0] (gh).catchup.installation_id, source[0] (gh).catchup.app_id and source[0] (gh).catchup.private_key": {AppID: "1", PrivateKey: "k", InstallationID: "2", Hook: "orgs/o/hooks/1"},
		"source[0] (gh).catchup.hook, source[0] (gh).catchup.app_id and source[0] (gh).catchup.private_key":                                         {AppID: "1", PrivateKey: "k", Hook: "app/hook"},
	} {
		c := &Config{Sources: []Source{{Name: "gh", Provider: "github", Catchup: cu}}}
		if got := c.CatchupNotFoundKeys("gh"); got != want {
			t.Errorf("%+v: %q, want %q", cu, got, want)
		}
	}
	c := &Config{Sources: []Source{{Name: "st", Provider: "stripe", Catchup: Catchup{APIKey: "k"}}}}
	if got := c.CatchupNotFoundKeys("st"); got != "" {
		t.Errorf("stripe: %q, want none", got)
	}
}
