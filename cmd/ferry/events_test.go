package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
)

// seeder opens the store under test directly with clock now.
type seeder struct {
	store ferry.Store
	close func()
}

// cliStore is one kind of store the CLI tests run on: setup makes an
// empty one and returns its URL and an opener of the store itself.
type cliStore struct {
	name  string
	setup func(t *testing.T) (storeURL string, open func(now func() time.Time) seeder)
}

// migrated sets the store up and migrates it with `ferry migrate`,
// returning the CLI config on it (migrateCLI) and the opener.
func (k cliStore) migrated(t *testing.T) (cfg string, open func(now func() time.Time) seeder) {
	t.Helper()
	storeURL, open := k.setup(t)
	return migrateCLI(t, storeURL), open
}

func cliStores() []cliStore {
	return []cliStore{
		{"sqlite", func(t *testing.T) (string, func(func() time.Time) seeder) {
			path := filepath.Join(t.TempDir(), "ferry.db")
			return "sqlite:" + path, func(now func() time.Time) seeder {
				s, err := sqlite.Open(path, &sqlite.Config{Now: now})
				if err != nil {
					t.Fatal(err)
				}
				return seeder{s, func() { s.Close() }}
			}
		}},
		{"postgres", func(t *testing.T) (string, func(func() time.Time) seeder) {
			pool, schema := pgtest.Schema(t)
			return pgtest.ConnString(schema), func(now func() time.Time) seeder {
				s := postgres.New(pool, &postgres.Config{Now: now})
				return seeder{s, s.Close}
			}
		}},
	}
}

// onEachCLIStore runs test as a parallel subtest on each kind of store,
// migrated (cliStore.migrated): cfg is the CLI config on it, open opens the
// store itself.
func onEachCLIStore(t *testing.T, test func(t *testing.T, cfg string, open func(now func() time.Time) seeder)) {
	for _, kind := range cliStores() {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			cfg, open := kind.migrated(t)
			test(t, cfg, open)
		})
	}
}

// writeCLIConfig writes a config for storeURL with sources stripe and github.
func writeCLIConfig(t *testing.T, storeURL, extra string) string {
	t.Helper()
	return writeTempFile(t, "ferry.toml", fmt.Sprintf(`
[store]
url = %q
[[source]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_cli"]
replay_window = "72h"
[[source]]
name = "github"
provider = "github"
secrets = ["gh_cli"]
%s`, storeURL, extra))
}

// seedScenario stores, in the store under test:
//
//	stripe/evt_done   done
//	stripe/evt_dead   dead ("card declined")
//	stripe/evt_old    pending, received 70h ago: at risk (72h window - 12h)
//	github/gh_fresh   pending, new; its body replayed once as github/gh_forged
func seedScenario(t *testing.T, open func(now func() time.Time) seeder) {
	t.Helper()
	ctx := context.Background()
	past := func() time.Time { return time.Now().Add(-70 * time.Hour) }
	s := open(past)
	receive := func(source, id string) {
		t.Helper()
		_, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{
			Source: source, EventID: id, Type: "invoice.paid",
			Payload: []byte(`{"id":"` + id + `","amount":4200}`),
			Headers: map[string][]string{"Content-Type": {"application/json"}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	receive("stripe", "evt_old")
	s.close()

	s = open(time.Now)
	defer s.close()
	receive("stripe", "evt_done")
	receive("stripe", "evt_dead")
	receive("github", "gh_fresh")
	res, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{
		Source: "github", EventID: "gh_forged", Type: "delete",
		Payload: []byte(`{"id":"gh_fresh","amount":4200}`), ReplayWindow: 72 * time.Hour,
	})
	if err != nil || res.Outcome != ferry.ReceiveReplay {
		t.Fatalf("seed replay = %+v, %v", res, err)
	}
	claims, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "seed", Limit: 10, TTL: time.Minute, Sources: []string{"stripe"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		switch c.Event.EventID {
		case "evt_done":
			err = s.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()})
		case "evt_dead":
			_, err = s.store.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Error: "card declined", Dead: true})
		default:
			err = s.store.EventRelease(ctx, &ferry.EventReleaseParams{Lease: c.Event.Lease()})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// show lists the replays a store keeps and says how many more it only
// counted, as the dashboard does.
func TestEventsShowCountsReplaysNotKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, s := migratedSQLite(t)
	body := []byte(`{"id":"gh_1"}`)
	for i := range ferry.NoticeKeep + 3 {
		if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{
			Source: "github", EventID: fmt.Sprintf("gh_%d", i+1), Payload: body, ReplayWindow: time.Hour,
		}); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	stdout, stderr, code := runFerry(t, "events", "show", "--config", cfg, "github", "gh_1")
	want := fmt.Sprintf("the first %d of %d are kept", ferry.NoticeKeep, ferry.NoticeKeep+2)
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("show: exit %d, want %q:\n%s%s", code, want, stdout, stderr)
	}
}

func listJSON(t *testing.T, args ...string) []eventLine {
	t.Helper()
	stdout, stderr, code := runFerry(t, append([]string{"events", "list", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("events list %v: exit %d: %s", args, code, stderr)
	}
	var out []eventLine
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		var l eventLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

func eventIDs(lines []eventLine) []string {
	var ids []string
	for _, l := range lines {
		ids = append(ids, l.Source+"/"+l.EventID)
	}
	return ids
}

func TestEventsCLI(t *testing.T) {
	t.Parallel()
	onEachCLIStore(t, func(t *testing.T, cfg string, open func(now func() time.Time) seeder) {
		seedScenario(t, open)

		t.Run("ListAll", func(t *testing.T) {
			lines := listJSON(t, "--config", cfg)
			if got := strings.Join(eventIDs(lines), " "); got != "github/gh_fresh stripe/evt_dead stripe/evt_done stripe/evt_old" {
				t.Fatalf("list = %s, want newest first", got)
			}
			byID := map[string]eventLine{}
			for _, l := range lines {
				byID[l.EventID] = l
			}
			if d := byID["evt_dead"]; d.State != "dead" || d.LastError != "card declined" || d.Attempt != 1 || d.Deliveries != 1 || d.Type != "invoice.paid" || d.ReceivedAt.IsZero() {
				t.Errorf("evt_dead = %+v", d)
			}
			if !byID["evt_old"].AtRisk || byID["gh_fresh"].AtRisk || byID["evt_dead"].AtRisk {
				t.Errorf("at_risk: old %v, fresh %v, dead %v; want only evt_old", byID["evt_old"].AtRisk, byID["gh_fresh"].AtRisk, byID["evt_dead"].AtRisk)
			}
		})
		t.Run("Filters", func(t *testing.T) {
			if got := eventIDs(listJSON(t, "--config", cfg, "--state", "dead")); len(got) != 1 || got[0] != "stripe/evt_dead" {
				t.Errorf("--state dead = %v", got)
			}
			if got := eventIDs(listJSON(t, "--config", cfg, "--source", "github")); len(got) != 1 || got[0] != "github/gh_fresh" {
				t.Errorf("--source github = %v", got)
			}
			if got := eventIDs(listJSON(t, "--config", cfg, "--since", "1h")); len(got) != 3 {
				t.Errorf("--since 1h = %v, want the three recent events", got)
			}
			if got := eventIDs(listJSON(t, "--config", cfg, "--at-risk")); len(got) != 1 || got[0] != "stripe/evt_old" {
				t.Errorf("--at-risk = %v, want stripe/evt_old", got)
			}
		})
		t.Run("Text", func(t *testing.T) {
			stdout, _, code := runFerry(t, "events", "list", "--config", cfg, "--source", "stripe")
			if code != 0 || !strings.Contains(stdout, "pending (AT RISK)") || !strings.Contains(stdout, "card declined") {
				t.Errorf("text list (exit %d):\n%s", code, stdout)
			}
		})
		t.Run("Show", func(t *testing.T) {
			d := showJSON(t, cfg, "stripe", "evt_dead", "--payload")
			var payload bytes.Buffer
			json.Compact(&payload, d.Payload)
			if d.State != "dead" || len(d.Attempts) != 1 || d.Attempts[0].Outcome != "dead" || d.Attempts[0].Error != "card declined" ||
				payload.String() != `{"id":"evt_dead","amount":4200}` || d.Headers["Content-Type"][0] != "application/json" {
				t.Errorf("show = %+v", d)
			}
			stdout, _, _ := runFerry(t, "events", "show", "--config", cfg, "stripe", "evt_dead")
			if strings.Contains(stdout, "4200") || !strings.Contains(stdout, "card declined") {
				t.Errorf("show without --payload printed the payload, or no error:\n%s", stdout)
			}
		})
		t.Run("ShowReplays", func(t *testing.T) {
			d := showJSON(t, cfg, "github", "gh_fresh")
			if len(d.Replays) != 1 || d.Replays[0].ClaimedEventID != "gh_forged" || d.Replays[0].ClaimedType != "delete" || d.Replays[0].ReceivedAt.IsZero() {
				t.Errorf("show replays = %+v, want gh_forged/delete", d.Replays)
			}
			stdout, _, _ := runFerry(t, "events", "show", "--config", cfg, "github", "gh_fresh")
			if !strings.Contains(stdout, "SUSPECTED REPLAY") || !strings.Contains(stdout, "gh_forged") {
				t.Errorf("text show does not flag the replay:\n%s", stdout)
			}
		})
		t.Run("NotFound", func(t *testing.T) {
			_, stderr, code := runFerry(t, "events", "show", "--config", cfg, "stripe", "evt_nope")
			if code != exitNotFound || stderr != "ferry events show: stripe evt_nope: no such event\n" {
				t.Errorf("show missing: exit %d, stderr %q; want %d", code, stderr, exitNotFound)
			}
		})
		t.Run("Usage", func(t *testing.T) {
			for _, args := range [][]string{
				{"events", "list", "--config", cfg, "--state", "stuck"},
				{"events", "list", "--config", cfg, "--since", "-24h"}, // ahead of now: it listed nothing
				{"events", "show", "--config", cfg, "stripe"},
				{"events", "replay", "--config", cfg, "--state", "dead"},
				{"events", "frobnicate"},
			} {
				if _, stderr, code := runFerry(t, args...); code != 2 || stderr == "" {
					t.Errorf("%v: exit %d, stderr %q; want 2 with a hint", args, code, stderr)
				}
			}
		})
		t.Run("Doctor", func(t *testing.T) {
			stdout, stderr, code := runFerry(t, "doctor", "--config", cfg)
			if code != exitProblems {
				t.Errorf("doctor: exit %d, want %d (an event is at risk)", code, exitProblems)
			}
			for _, want := range []string{"FAIL  source stripe: 1 event at risk", "at risk: stripe evt_old", "FAIL  source stripe: 1 dead event\n", "ferry events replay --state dead --source stripe", "ferry events retry-now stripe ID", "store: "} {
				if !strings.Contains(stdout, want) {
					t.Errorf("doctor output lacks %q:\n%s\n%s", want, stdout, stderr)
				}
			}
		})
		// Replay last: it changes the states the other subtests read.
		t.Run("Replay", func(t *testing.T) {
			// A dry run says what would be replayed and changes nothing.
			stdout, stderr, code := runFerry(t, "events", "replay", "--config", cfg, "--dry-run", "--state", "dead", "--source", "stripe")
			if code != 0 || stdout != "would replay 1 dead event of stripe (dry run: nothing changed)\n" {
				t.Errorf("bulk replay --dry-run: exit %d\n%s\n%s", code, stdout, stderr)
			}
			// Bulk replay takes what EventRequeue takes: done events too,
			// never queued or running ones.
			stdout, stderr, code = runFerry(t, "events", "replay", "--config", cfg, "--dry-run", "--state", "done", "--source", "stripe")
			if code != 0 || stdout != "would replay 1 done event of stripe (dry run: nothing changed)\n" {
				t.Errorf("bulk replay --state done --dry-run: exit %d\n%s\n%s", code, stdout, stderr)
			}
			wantFerry(t, exitUsage, "", "ferry events replay: --state \"pending\": bulk replay takes done, dead or unknown (queued and running events are left as they are)\n",
				"events", "replay", "--config", cfg, "--dry-run", "--state", "pending", "--source", "stripe")
			stdout, stderr, code = runFerry(t, "events", "replay", "--config", cfg, "--dry-run", "stripe", "evt_done")
			if code != 0 || stdout != "would replay stripe evt_done\n" {
				t.Errorf("replay --dry-run evt_done: exit %d\n%s\n%s", code, stdout, stderr)
			}
			if got := listJSON(t, "--config", cfg, "--state", "dead"); len(got) != 1 {
				t.Errorf("after bulk replay --dry-run, dead = %v, want the one still dead", eventIDs(got))
			}
			if d := showJSON(t, cfg, "stripe", "evt_done"); d.State != "done" {
				t.Errorf("after replay --dry-run, evt_done is %s, want done", d.State)
			}
			// A queued event is left as it is, and the exit code says so,
			// in a dry run too.
			for dry, refused := range map[string]string{"--dry-run=true": "would not replay", "--dry-run=false": "not replayed"} {
				wantFerry(t, exitLeft, "", "ferry events replay: stripe evt_old (pending): "+refused+", already queued or running\n",
					"events", "replay", "--config", cfg, dry, "stripe", "evt_old")
			}
			stdout, stderr, code = runFerry(t, "events", "replay", "--config", cfg, "--actor", "alice", "stripe", "evt_done", "evt_nope")
			if code != exitNotFound || !strings.Contains(stdout, "replayed stripe evt_done") || stderr != "ferry events replay: stripe evt_nope: no such event\n" {
				t.Errorf("replay one + missing: exit %d\n%s\n%s", code, stdout, stderr)
			}
			stdout, stderr, code = runFerry(t, "events", "replay", "--config", cfg, "--state", "dead", "--source", "stripe")
			if code != 0 || stdout != "replayed 1 dead event of stripe\n" {
				t.Errorf("bulk replay: exit %d\n%s\n%s", code, stdout, stderr)
			}
			if got := listJSON(t, "--config", cfg, "--state", "dead"); len(got) != 0 {
				t.Errorf("after bulk replay, dead = %v", eventIDs(got))
			}
			if got := listJSON(t, "--config", cfg, "--state", "pending", "--source", "stripe"); len(got) != 3 {
				t.Errorf("after replays, stripe pending = %v, want 3", eventIDs(got))
			}
			// Who did each is kept with the event and shown.
			for _, tc := range []struct{ id, action, actor string }{
				{"evt_done", "replay", "alice"},
				{"evt_dead", "requeue", "cli"}, // --actor defaults to cli:$USER, or cli
			} {
				d := showJSON(t, cfg, "stripe", tc.id)
				if len(d.Actions) != 1 || d.Actions[0].Action != tc.action || !strings.HasPrefix(d.Actions[0].Actor, tc.actor) || d.Actions[0].At.IsZero() {
					t.Errorf("%s actions = %+v, want one %s by %s", tc.id, d.Actions, tc.action, tc.actor)
				}
				text, _, _ := runFerry(t, "events", "show", "stripe", tc.id, "--config", cfg)
				if !strings.Contains(text, "actions:") || !strings.Contains(text, tc.actor) {
					t.Errorf("text show lacks the action:\n%s", text)
				}
			}
		})
	})
}

// A config that does not load exits 2 with the key and the fix; doctor on
// a healthy, empty store exits 0; a source with no forward.url fails
// doctor for a role that runs workers, as it stops serve.
func TestDoctorConfigAndHealthy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[store]\nurl = \"mysql://x\"\n"), 0o600)
	if _, stderr, code := runFerry(t, "doctor", "--config", bad); code != 2 || !strings.Contains(stderr, "store.url") {
		t.Errorf("bad config: exit %d, stderr %q", code, stderr)
	}
	path := filepath.Join(dir, "ferry.db")
	cfg := writeCLIConfig(t, "sqlite:"+path, "")
	// A store file that is there but was never migrated needs a human.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if stdout, _, code := runFerry(t, "doctor", "--config", cfg); code != exitProblems || !strings.Contains(stdout, "ferry migrate") {
		t.Errorf("unmigrated store: exit %d, want %d and the fix 'ferry migrate':\n%s", code, exitProblems, stdout)
	}
	runFerry(t, "migrate", "--config", cfg)
	if stdout, _, code := runFerry(t, "doctor", "--config", cfg, "--role", "receiver"); code != 0 {
		t.Errorf("healthy store: exit %d:\n%s", code, stdout)
	}
	// The config has no forward.url: serve refuses to run workers with it,
	// and doctor for a role that runs them says so, as a FAIL.
	if _, stderr, code := runFerry(t, "serve", "--config", cfg); code != 2 || !strings.Contains(stderr, "source[0] (stripe).forward.url: missing") {
		t.Errorf("serve with no forward.url: exit %d, want 2 naming the key:\n%s", code, stderr)
	}
	for _, role := range []string{"all", "worker"} {
		stdout, _, code := runFerry(t, "doctor", "--config", cfg, "--role", role)
		if code != exitProblems || !strings.Contains(stdout, "FAIL  source stripe: no forward.url") || !strings.Contains(stdout, "fix: set source[0] (stripe).forward.url") {
			t.Errorf("doctor --role %s with no forward.url: exit %d, want %d and the key:\n%s", role, code, exitProblems, stdout)
		}
	}
	if _, stderr, code := runFerry(t, "doctor", "--config", cfg, "--role", "workers"); code != 2 || !strings.Contains(stderr, "use receiver, worker or all") {
		t.Errorf("doctor --role workers: exit %d, want 2:\n%s", code, stderr)
	}
	// A store that refuses to run as set (here synchronous_commit off, as
	// a DBA's ALTER ROLE would set it) is a finding with the report, not a
	// config error without one: monitoring reads doctor --json.
	unsafe := writeCLIConfig(t, pgtest.SchemaURL(t)+"&options=-c%20synchronous_commit%3Doff", "")
	stdout, stderr, code := runFerry(t, "doctor", "--config", unsafe, "--json")
	if code != exitProblems || !strings.Contains(stdout, `"healthy": false`) || !strings.Contains(stdout, "synchronous_commit") {
		t.Errorf("store refused as set: exit %d, want %d and a report naming synchronous_commit:\n%s%s", code, exitProblems, stdout, stderr)
	}
}

// --at-risk --source X lists X's at-risk events even when more than
// --limit older ones belong to other sources: the filters apply before
// the limit.
func TestEventsListAtRiskFiltersBeforeTheLimit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ferry.db")
	cfg := writeCLIConfig(t, "sqlite:"+path, "")
	receive := func(ago time.Duration, source, id string) {
		t.Helper()
		s, err := sqlite.Open(path, &sqlite.Config{Now: func() time.Time { return time.Now().Add(-ago) }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: source, EventID: id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	receive(71*time.Hour, "github", "gh_1") // both at risk, and older
	receive(71*time.Hour, "github", "gh_2")
	receive(70*time.Hour, "stripe", "evt_old")
	if got := eventIDs(listJSON(t, "--config", cfg, "--at-risk", "--source", "stripe", "--limit", "1")); len(got) != 1 || got[0] != "stripe/evt_old" {
		t.Fatalf("--at-risk --source stripe --limit 1 = %v, want stripe/evt_old", got)
	}
	if got := eventIDs(listJSON(t, "--config", cfg, "--at-risk", "--limit", "2")); len(got) != 2 || got[0] != "github/gh_1" {
		t.Fatalf("--at-risk --limit 2 = %v, want the two oldest", got)
	}
}

// events show redacts what the dashboard redacts: a library Receiver may
// keep a credential-like header (KeepHeaders), and the store has it.
func TestEventsShowRedactsCredentialHeaders(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ferry.db")
	s := teststore.SQLiteAt(t, path, nil)
	if _, err := s.EventReceive(context.Background(), &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_h", Payload: []byte(`{}`),
		Headers: http.Header{"X-Gitlab-Token": {"glpat-SEKRET1"}, "X-Api-Key": {"SEKRET2"}, "Content-Type": {"application/json"}}}); err != nil {
		t.Fatal(err)
	}
	cfg := writeCLIConfig(t, "sqlite:"+path, "")
	for _, extra := range [][]string{nil, {"--json"}} {
		stdout, stderr, code := runFerry(t, append([]string{"events", "show", "--config", cfg, "stripe", "evt_h"}, extra...)...)
		if code != 0 || strings.Contains(stdout, "SEKRET") || !strings.Contains(stdout, "redacted") || !strings.Contains(stdout, "application/json") {
			t.Errorf("events show %v: exit %d, want credential-like values redacted and the rest shown:\n%s%s", extra, code, stdout, stderr)
		}
	}
}

// Stored text reaches the terminal as text: an app's status line with
// escape sequences (a new window title, red) is printed escaped in list
// and show, in the error, the attempt, the header; a long error is cut on
// a character, never inside one.
func TestEventsPrintControlCharactersEscaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, s := migratedSQLite(t)
	hostile := "forward: app answered 500 \x1b]0;PWNED\x07\x1b[31mInternal\x1b[0m \u202egnp.exe \u2066isolate\u2069 \u200fmark"
	if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_esc", Payload: []byte(`{}`),
		Headers: http.Header{"X-Note": {"a\x1b[2Jb"}}}); err != nil {
		t.Fatal(err)
	}
	c, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: time.Minute})
	if err != nil || len(c) != 1 {
		t.Fatalf("claim: %v %v", c, err)
	}
	long := strings.Repeat("é", 300) // two bytes each: a byte cut would split one
	if _, err := s.store.EventFail(ctx, &ferry.EventFailParams{Lease: c[0].Event.Lease(), Error: hostile + " " + long, RetryDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// A worker's name reaches show's lease row while it holds the event.
	if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_leased", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w\x1b[5mblink", Limit: 1, TTL: time.Hour}); err != nil || len(c) != 1 || c[0].Event.EventID != "evt_leased" {
		t.Fatalf("claim evt_leased: %v %v", c, err)
	}
	s.close()
	if stdout, _, _ := runFerry(t, "events", "show", "--config", cfg, "stripe", "evt_leased"); strings.Contains(stdout, "\x1b") || !strings.Contains(stdout, `w\x1b[5mblink until`) {
		t.Errorf("show's lease row is not escaped:\n%q", stdout)
	}
	for _, args := range [][]string{{"list"}, {"show", "stripe", "evt_esc"}} {
		stdout, stderr, code := runFerry(t, append([]string{"events", args[0], "--config", cfg}, args[1:]...)...)
		if code != 0 {
			t.Fatalf("events %v: exit %d: %s", args, code, stderr)
		}
		if strings.ContainsAny(stdout, "\x1b\x07\u202e\u2066\u2069\u200f") || !strings.Contains(stdout, `500 \x1b]0;PWNED\a\x1b[31mInternal`) {
			t.Errorf("events %v prints control characters raw, or not escaped:\n%q", args, stdout)
		}
		if !utf8.ValidString(stdout) || (args[0] == "show" && !strings.Contains(stdout, "é…")) {
			t.Errorf("events %v cuts the long error badly:\n%q", args, stdout)
		}
	}
	if stdout, _, _ := runFerry(t, "events", "show", "--config", cfg, "stripe", "evt_esc"); !strings.Contains(stdout, `a\x1b[2Jb`) {
		t.Errorf("show's header is not escaped:\n%q", stdout)
	}
}

// The CLI's actor is $USER, made text a store keeps: a Latin-1 user name
// would otherwise fail every replay with ErrInvalidParams. Without $USER
// (a root shell, a container) it is the user the process runs as.
func TestDefaultActorIsStorable(t *testing.T) {
	t.Setenv("USER", "j\xf6rg")
	if got := defaultActor(); got != "cli:j\uFFFDrg" {
		t.Errorf("defaultActor() = %q, want %q", got, "cli:j\uFFFDrg")
	}
	want := "cli" // where the process's user cannot be looked up
	if me, err := user.Current(); err == nil {
		want = "cli:" + me.Username
	}
	t.Setenv("USER", "")
	if got := defaultActor(); got != want {
		t.Errorf("defaultActor() without $USER = %q, want %q", got, want)
	}
}

// A --source the config does not name is a usage error listing the
// configured sources, in every command that takes one: not an empty list
// or "replayed 0" and exit 0.
func TestUnknownSourceFlag(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "ferry.db")
	cfg := migrateCLI(t, "sqlite:"+dbPath)
	// A source taken out of the config keeps its events, which a list still
	// reaches by name; a replay would leave them to no worker.
	st := teststore.OpenSQLite(t, dbPath, nil)
	deadEvent(t, st, "retired", "evt_old", "gone")
	// doctor names the source and its dead event, fails on it as on a
	// configured source's, and sends no one to a replay it would refuse.
	if out, _, code := runFerry(t, "doctor", "--config", cfg); code != exitProblems ||
		!strings.Contains(out, "FAIL  source retired: 1 dead event in the store, but the source is not configured") ||
		!strings.Contains(out, "ferry events resolve retired ID") || strings.Contains(out, "replay --state dead --source retired") {
		t.Errorf("doctor on a retired source's dead event: exit %d, want %d:\n%s", code, exitProblems, out)
	}
	if out, stderr, code := runFerry(t, "events", "list", "--source", "retired", "--config", cfg); code != 0 || !strings.Contains(out, "evt_old") {
		t.Errorf("events list --source retired: exit %d, %q %q; want evt_old listed", code, out, stderr)
	}
	if out, stderr, code := runFerry(t, "events", "show", "retired", "evt_old", "--config", cfg); code != 0 || !strings.Contains(out, "evt_old") {
		t.Errorf("events show retired evt_old: exit %d, %q %q; want it shown", code, out, stderr)
	}
	for _, args := range [][]string{{"--state", "dead", "--source", "retired"}, {"retired", "evt_old"}} {
		if _, stderr, code := runFerry(t, append(append([]string{"events", "replay"}, args...), "--config", cfg)...); code != exitUsage {
			t.Errorf("events replay %v: exit %d, %q; want %d", args, code, stderr, exitUsage)
		}
	}
	// Resolving runs nothing, so it takes a retired source: how its dead
	// events clear.
	if out, stderr, code := runFerry(t, "events", "resolve", "retired", "evt_old", "--actor", "alice", "--config", cfg); code != 0 || out != "resolved retired evt_old\n" {
		t.Errorf("events resolve retired evt_old: exit %d, %q %q; want it resolved", code, out, stderr)
	}
	if _, _, code := runFerry(t, "events", "resolve", "nosuch", "evt_old", "--config", cfg); code != exitUsage {
		t.Errorf("events resolve nosuch: exit %d, want %d", code, exitUsage)
	}
	for _, args := range [][]string{
		{"events", "list", "--source", "nosuch"},
		{"events", "list", "--at-risk", "--source", "nosuch"},
		{"events", "replay", "--state", "dead", "--source", "nosuch"},
		{"events", "show", "nosuch", "evt_old"},
		{"send", "--source", "nosuch"},
		{"reconcile", "--source", "nosuch"},
	} {
		stdout, stderr, code := runFerry(t, append(args, "--config", cfg)...)
		command := args[0]
		if command == "events" {
			command += " " + args[1]
		}
		want := "ferry " + command + `: source "nosuch" is not in the config: use one of stripe, github` + "\n"
		if code != exitUsage || stderr != want || stdout != "" {
			t.Errorf("ferry %s: exit %d, stdout %q, stderr %q; want %d and %q", strings.Join(args, " "), code, stdout, stderr, exitUsage, want)
		}
	}
}

// show lists the conflicting payloads a store keeps (received at, size,
// sha256; the payload with --payload only) and says how many more it only
// counted.
func TestEventsShowConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, s := migratedSQLite(t)
	var payloads [][]byte
	for i := range ferry.NoticeKeep + 3 {
		payloads = append(payloads, []byte(fmt.Sprintf(`{"id":"evt_1","amount":%d}`, 1000+i)))
		if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: payloads[i]}); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	conflicting := payloads[1:]

	d := showJSON(t, cfg, "stripe", "evt_1")
	if len(d.ConflictsKept) != ferry.NoticeKeep {
		t.Fatalf("show --json lists %d conflicts, want %d: %+v", len(d.ConflictsKept), ferry.NoticeKeep, d.ConflictsKept)
	}
	// The count is list --json's "conflicts", not hidden by the list of
	// the kept ones.
	if d.Conflicts != ferry.NoticeKeep+2 {
		t.Errorf("show --json conflicts = %d, want the count %d as list --json has it", d.Conflicts, ferry.NoticeKeep+2)
	}
	for i, c := range d.ConflictsKept {
		if c.PayloadSHA256 != fmt.Sprintf("%x", sha256.Sum256(conflicting[i])) || c.PayloadBytes != len(conflicting[i]) || c.ReceivedAt.IsZero() || c.Payload != nil || c.PayloadText != "" {
			t.Errorf("conflict %d = %+v, want %s's hash and size, no payload", i, c, conflicting[i])
		}
	}
	d = showJSON(t, cfg, "stripe", "evt_1", "--payload")
	var first bytes.Buffer
	if len(d.ConflictsKept) > 0 {
		json.Compact(&first, d.ConflictsKept[0].Payload)
	}
	if first.String() != string(conflicting[0]) {
		t.Errorf("show --json --payload: first conflict's payload %q, want %s", first.String(), conflicting[0])
	}
	stdout, stderr, code := runFerry(t, "events", "show", "--config", cfg, "stripe", "evt_1")
	want := fmt.Sprintf("the first %d of %d are kept", ferry.NoticeKeep, ferry.NoticeKeep+2)
	sum := fmt.Sprintf("%x", sha256.Sum256(conflicting[0]))
	if code != 0 || !strings.Contains(stdout, "conflicts (") || !strings.Contains(stdout, want) || !strings.Contains(stdout, sum) || strings.Contains(stdout, "1001") {
		t.Errorf("show: exit %d, want a conflicts section with %q and %s, no payload:\n%s%s", code, want, sum, stdout, stderr)
	}
	stdout, _, _ = runFerry(t, "events", "show", "--config", cfg, "--payload", "stripe", "evt_1")
	if !strings.Contains(stdout, string(conflicting[0])) {
		t.Errorf("show --payload lacks the first conflicting payload:\n%s", stdout)
	}
}

// partnerSource is a generic HMAC source whose signature header,
// X-Partner-Check, has a name no rule of names marks as a signature.
const partnerSource = `
[[source]]
name = "partner"
provider = "hmac"
secrets = ["partner_secret", "partner_old"]
[source.hmac]
header = "X-Partner-Check"
event_id_header = "X-Partner-Id"
`

// show lists each suspected replay with the headers it came with (who sent
// it), and redacts there what it redacts on the event: the providers'
// signatures, anything credential-like, and the signature header a generic
// HMAC source configures under a name of its own.
func TestEventsShowReplayHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ferry.db")
	cfg := writeCLIConfig(t, "sqlite:"+path, partnerSource)
	if _, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	st := teststore.OpenSQLite(t, path, nil)
	body := []byte(`{"order":7}`)
	if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "partner", EventID: "p_1", Payload: body, ReplayWindow: time.Hour,
		Headers: http.Header{"X-Partner-Check": {"SEKRET0"}}}); err != nil {
		t.Fatal(err)
	}
	res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "partner", EventID: "p_forged", Type: "refund", Payload: body, ReplayWindow: time.Hour,
		Headers: http.Header{"User-Agent": {"replayer/1.0"}, "X-Partner-Check": {"SEKRET1"}, "X-Hub-Signature-256": {"sha256=SEKRET2"}, "Authorization": {"Bearer SEKRET3"}}})
	if err != nil || res.Outcome != ferry.ReceiveReplay {
		t.Fatalf("seed replay = %+v, %v", res, err)
	}

	d := showJSON(t, cfg, "partner", "p_1")
	if len(d.Replays) != 1 {
		t.Fatalf("show --json replays = %+v, want p_forged", d.Replays)
	}
	h := d.Replays[0].Headers
	if got := h["User-Agent"]; len(got) != 1 || got[0] != "replayer/1.0" {
		t.Errorf("replay's User-Agent = %q, want replayer/1.0 (headers %v)", got, h)
	}
	for _, name := range []string{"X-Partner-Check", "X-Hub-Signature-256", "Authorization"} {
		if got := h[name]; len(got) != 1 || got[0] != "redacted" {
			t.Errorf("replay's %s = %q, want redacted", name, got)
		}
	}
	if got := d.Headers["X-Partner-Check"]; len(got) != 1 || got[0] != "redacted" {
		t.Errorf("event's X-Partner-Check = %q, want redacted", got)
	}
	for _, extra := range [][]string{nil, {"--json"}} {
		stdout, stderr, code := runFerry(t, append([]string{"events", "show", "--config", cfg, "partner", "p_1"}, extra...)...)
		if code != 0 || strings.Contains(stdout, "SEKRET") || !strings.Contains(stdout, "replayer/1.0") {
			t.Errorf("events show %v: exit %d, want the replay's User-Agent and no signature or credential:\n%s%s", extra, code, stdout, stderr)
		}
	}
}

// show marks an in-progress event whose lease lapsed on the store's clock
// as expired, and no other.
func TestEventsShowExpiredLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, open := cliStores()[0].migrated(t)
	claim := func(s seeder, id string, ttl time.Duration) {
		t.Helper()
		defer s.close()
		if _, err := s.store.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if c, err := s.store.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w-" + id, Limit: 1, TTL: ttl}); err != nil || len(c) != 1 || c[0].Event.EventID != id {
			t.Fatalf("claim %s: %v %v", id, c, err)
		}
	}
	claim(open(time.Now), "evt_live", time.Hour)
	// Claimed an hour ago for a minute: lapsed 59 minutes ago.
	claim(open(func() time.Time { return time.Now().Add(-time.Hour) }), "evt_lapsed", time.Minute)

	for id, want := range map[string]bool{"evt_lapsed": true, "evt_live": false} {
		if d := showJSON(t, cfg, "stripe", id); d.State != "in_progress" || d.LeaseExpired != want {
			t.Errorf("show --json %s: state %s, lease_expired %v; want in_progress, %v", id, d.State, d.LeaseExpired, want)
		}
		stdout, stderr, code := runFerry(t, "events", "show", "--config", cfg, "stripe", id)
		if code != 0 || !strings.Contains(stdout, "w-"+id+" until") || strings.Contains(stdout, "(expired") != want {
			t.Errorf("events show %s: exit %d, want the lease row marked expired: %v\n%s%s", id, code, want, stdout, stderr)
		}
	}
}

// A filter the store refuses (not UTF-8) is bad usage, exit 2 with the
// store's reason, as the dashboard answers it 400: asking again fails
// again, so a script must not take it for a failure to retry.
func TestEventsListRefusedFilterIsUsage(t *testing.T) {
	t.Parallel()
	cfg, _ := cliStores()[0].migrated(t)
	_, stderr, code := runFerry(t, "events", "list", "--config", cfg, "--id", "\xff")
	if code != exitUsage || !strings.Contains(stderr, "is not UTF-8 text without NUL") {
		t.Fatalf("list --id \\xff: exit %d, want %d with the reason\n%s", code, exitUsage, stderr)
	}
}

// list --unfinished-attempts lists the events an attempt of which ended
// without a verdict, done ones too, with the other filters; with --at-risk,
// another list, it is a usage error.
func TestEventsListUnfinishedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, open := cliStores()[0].migrated(t)
	// at runs f on the store with its clock ago back from now.
	at := func(ago time.Duration, f func(s ferry.Store) error) {
		t.Helper()
		s := open(func() time.Time { return time.Now().Add(-ago) })
		defer s.close()
		if err := f(s.store); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(ids ...string) func(ferry.Store) error {
		return func(s ferry.Store) error {
			for _, id := range ids {
				source, eventID, _ := strings.Cut(id, "/")
				if _, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte(`{}`)}); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// claim claims every due event, and completes stripe's if complete.
	claim := func(complete bool) func(ferry.Store) error {
		return func(s ferry.Store) error {
			claims, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 10, TTL: time.Minute})
			for _, c := range claims {
				if err == nil && complete && c.Event.Source == "stripe" {
					err = s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: c.Event.Lease()})
				}
			}
			return err
		}
	}
	at(time.Hour, receive("stripe/evt_lapsed", "github/gh_lapsed"))
	at(time.Hour, claim(false))  // the worker dies
	at(time.Minute, claim(true)) // its leases lapsed long ago: taken back
	at(0, receive("stripe/evt_clean"))
	at(0, claim(true))
	at(0, receive("stripe/evt_pending"))

	if got := strings.Join(eventIDs(listJSON(t, "--config", cfg, "--unfinished-attempts")), " "); got != "github/gh_lapsed stripe/evt_lapsed" {
		t.Errorf("--unfinished-attempts = %s, want github/gh_lapsed stripe/evt_lapsed", got)
	}
	if got := strings.Join(eventIDs(listJSON(t, "--config", cfg, "--unfinished-attempts", "--source", "stripe", "--state", "done")), " "); got != "stripe/evt_lapsed" {
		t.Errorf("--unfinished-attempts --source stripe --state done = %s, want stripe/evt_lapsed", got)
	}
	if got := len(listJSON(t, "--config", cfg)); got != 4 {
		t.Errorf("without --unfinished-attempts: %d events, want all 4", got)
	}
	stdout, stderr, code := runFerry(t, "events", "list", "--config", cfg, "--unfinished-attempts", "--at-risk")
	if code != exitUsage || !strings.Contains(stderr, "--unfinished-attempts") || stdout != "" {
		t.Errorf("--unfinished-attempts --at-risk: exit %d, stderr %q; want %d naming the flag", code, stderr, exitUsage)
	}
}
