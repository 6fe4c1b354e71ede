package main

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry/internal/config"
)

func TestMemoryLimit(t *testing.T) {
	t.Parallel()

	parse := func(t *testing.T, http, maxBody string) *config.Config {
		t.Helper()
		raw := "[store]\nurl = \"sqlite:ferry.db\"\n" + http + "[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"s\"]\n" + maxBody +
			"[source.forward]\nurl = \"http://127.0.0.1:3000/\"\n"
		cfg, err := config.Parse([]byte(raw), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	// The budgets each role holds, counted twice, plus the base.
	for _, tc := range []struct {
		name             string
		http, maxBody    string
		receiver, worker bool
		wantMiB          int64
	}{
		{"DefaultsRoleAll", "", "", true, true, 32 + 2*(8+16+2)},
		{"DefaultsReceiver", "", "", true, false, 32 + 2*8},
		{"DefaultsWorker", "", "", false, true, 32 + 2*(16+2)},
		{"LargeMaxBodyRoleAll", "", "max_body = 33554432\n", true, true, 32 + 2*(32+16+64)},
		{"LargerBudgetReceiver", "[http]\nmax_in_flight = 67108864\n", "", true, false, 32 + 2*64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := memoryLimit(parse(t, tc.http, tc.maxBody), tc.receiver, tc.worker); got != tc.wantMiB<<20 {
				t.Errorf("memoryLimit = %d MiB, want %d MiB", got>>20, tc.wantMiB)
			}
		})
	}
}

// Budgets whose sum would overflow give no limit, never a negative one.
func TestMemoryLimitSaturates(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{HTTP: config.HTTP{MaxInFlight: math.MaxInt64}, Sources: []config.Source{{MaxBody: math.MaxInt64}}}
	for _, roles := range [][2]bool{{true, true}, {true, false}, {false, true}} {
		if got := memoryLimit(cfg, roles[0], roles[1]); got != math.MaxInt64 {
			t.Errorf("memoryLimit(receiver %v, worker %v) = %d, want math.MaxInt64", roles[0], roles[1], got)
		}
	}
}

// TestServeSetsMemoryLimit runs the binary: serve logs the limit it reads
// back with debug.SetMemoryLimit(-1), derived from its config unless
// GOMEMLIMIT says otherwise.
func TestServeSetsMemoryLimit(t *testing.T) {
	t.Parallel()

	servingLimit := func(t *testing.T, p *serveProc) string {
		t.Helper()
		for line := range strings.SplitSeq(p.log(), "\n") {
			var rec struct {
				Msg         string `json:"msg"`
				MemoryLimit string `json:"memory_limit"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "ferry: serving" {
				return rec.MemoryLimit
			}
		}
		t.Fatalf("no serving line in:\n%s", p.log())
		return ""
	}
	configWith := func(t *testing.T, maxBody int64) string {
		return writeServeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), fmt.Sprintf(`
[[source]]
name = "stripe"
provider = "stripe"
secrets = [%q]
max_body = %d
[source.forward]
url = "http://127.0.0.1:1/"
`, stripeSecret, maxBody))
	}

	for _, tc := range []struct {
		name    string
		env     string
		maxBody int64
		args    []string
		want    string
	}{
		// max_body 4 MiB: the receiver's budget stays 8 MiB, the worker's
		// is 16 MiB plus two 4 MiB bodies: 32 + 2 × (8 + 24).
		{"FromConfig", "GOMEMLIMIT=", 4 << 20, nil, "96MiB"},
		{"FromConfigReceiverRole", "GOMEMLIMIT=", 4 << 20, []string{"--role", "receiver"}, "48MiB"},
		{"GOMEMLIMITWins", "GOMEMLIMIT=200MiB", 4 << 20, nil, "200MiB"},
		{"GOMEMLIMITOff", "GOMEMLIMIT=off", 4 << 20, nil, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startServeWith(t, ferryBin, []string{tc.env}, configWith(t, tc.maxBody), tc.args...)
			if got := servingLimit(t, p); got != tc.want {
				t.Errorf("memory_limit = %q, want %q", got, tc.want)
			}
		})
	}
}
