package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/catchup"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/sqlite"
)

// Every command's -h says what the command does, on stdout (help asked
// for pipes into a pager), and exits 0; a flag it does not know is a usage
// error: exit 2 and one line on stderr naming the help.
func TestHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{
		{"serve"}, {"migrate"}, {"send"}, {"echo"}, {"doctor"}, {"chaos"}, {"reconcile"},
		{"events", "list"}, {"events", "show"}, {"events", "replay"}, {"healthcheck"}, {"version"},
	} {
		name := strings.Join(cmd, " ")
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			help, stderr, code := runFerry(t, append(cmd, "-h")...)
			if code != 0 || stderr != "" {
				t.Errorf("ferry %s -h: exit %d, stderr %q; want 0 and the help on stdout alone", name, code, stderr)
			}
			// usage line, a blank line, a description of at least one
			// sentence, a blank line, then the flags (version has none).
			flags := `\nflags:\n  -`
			if name == "version" {
				flags = `$`
			}
			shape := regexp.MustCompile(`(?s)^usage: ferry ` + name + `( [^\n]*)?\n\n([^\n]+\n)+` + flags)
			if !shape.MatchString(help) {
				t.Errorf("ferry %s -h lacks a usage line, a description and the flags:\n%s", name, help)
			}
			// A flag's placeholder is one word: flag takes backquoted text
			// in a usage string for it.
			for _, line := range regexp.MustCompile(`(?m)^  -.*$`).FindAllString(help, -1) {
				if !regexp.MustCompile(`^  -[a-z-]+( \S+)?$`).MatchString(line) {
					t.Errorf("ferry %s -h: flag line %q: its placeholder is not one word", name, line)
				}
			}

			_, stderr, code = runFerry(t, append(cmd, "--bogus")...)
			want := fmt.Sprintf("ferry %s: flag provided but not defined: -bogus (see 'ferry %s -h')\n", name, name)
			if code != exitUsage || stderr != want {
				t.Errorf("ferry %s --bogus: exit %d, stderr %q; want %d and %q", name, code, stderr, exitUsage, want)
			}
		})
	}
	t.Run("NoCommand", func(t *testing.T) {
		t.Parallel()
		if _, stderr, code := runFerry(t); code != exitUsage || !strings.Contains(stderr, "commands:") {
			t.Errorf("ferry: exit %d, want %d and the command list:\n%s", code, exitUsage, stderr)
		}
		for _, ask := range [][]string{{"help"}, {"--help"}, {"events", "-h"}} {
			if stdout, stderr, code := runFerry(t, ask...); code != exitOK || stderr != "" || !strings.HasPrefix(stdout, "usage:") {
				t.Errorf("ferry %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout alone", strings.Join(ask, " "), code, stdout, stderr)
			}
		}
		if _, _, code := runFerry(t, "frobnicate"); code != exitUsage {
			t.Errorf("ferry frobnicate: exit %d, want %d", code, exitUsage)
		}
	})
	// A flag before the events subcommand is refused as one, not as an
	// unknown subcommand "--config".
	t.Run("EventsFlagFirst", func(t *testing.T) {
		t.Parallel()
		wantFerry(t, exitUsage, "", `ferry events: "--config" is a flag: name a subcommand first (list, show, replay, retry-now or resolve), then its flags, like: ferry events list --config FILE`+"\n",
			"events", "--config", "ferry.toml")
	})
}

// A config that does not load is one line with one prefix: the command.
func TestConfigErrorHasOnePrefix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.toml")
	_, stderr, code := runFerry(t, "events", "list", "--config", missing)
	want := "ferry events list: open " + missing + ": no such file or directory (name the config file with --config FILE)\n"
	if code != exitUsage || stderr != want {
		t.Errorf("missing config: exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, want)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[store]\nurl = \"mysql://x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runFerry(t, "doctor", "--config", bad)
	if code != exitUsage || !strings.HasPrefix(stderr, "ferry doctor: "+bad+": config invalid:\n  store.url: ") || strings.Count(stderr, "config") != 2 {
		t.Errorf("bad config: exit %d, stderr %q; want %d, the file once and the key", code, stderr, exitUsage)
	}
}

// A command that reads or changes a store in use refuses a SQLite path
// that is not there, and leaves no empty store behind to be mistaken for
// the real one; migrate makes it.
func TestMissingSQLiteStoreIsNotCreated(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ferri.db")
	cfg := writeCLIConfig(t, "sqlite:"+path, "")
	for _, args := range [][]string{
		{"events", "list"},
		{"events", "show", "stripe", "evt_1"},
		{"events", "replay", "--state", "dead", "--source", "stripe"},
		// doctor says the same, once: no FAIL line with a fix of its own
		// beside it, and no report (--json's would read healthy).
		{"doctor"},
		{"doctor", "--json"},
	} {
		stdout, stderr, code := runFerry(t, append(args, "--config", cfg)...)
		if code != exitUsage || !strings.Contains(stderr, "store.url") || !strings.Contains(stderr, "ferry migrate") ||
			strings.Count(stderr, "\n") != 1 || strings.Contains(stdout, "FAIL") || strings.Contains(stdout, "store:") || strings.Contains(stdout, "healthy") {
			t.Errorf("ferry %s: exit %d, stdout %q, stderr %q; want %d naming store.url and ferry migrate on one line", strings.Join(args, " "), code, stdout, stderr, exitUsage)
		}
	}
	// A relative path says where it was looked for, and offers no ferry
	// migrate: run elsewhere than serve, that would make a second store.
	relative := writeCLIConfig(t, "sqlite:no-such-ferry.db", "")
	if _, stderr, _ := runFerry(t, "events", "list", "--config", relative); !strings.Contains(stderr, "relative to the working directory") ||
		!strings.Contains(stderr, "the directory ferry serve runs in, or make store.url's path absolute") || strings.Contains(stderr, "ferry migrate") {
		t.Errorf("a relative path: %q, want the working directory named and no ferry migrate", stderr)
	}
	// An in-memory store is no store another process could open: no
	// ferry migrate could make one either.
	for _, url := range []string{"sqlite::memory:", "sqlite:file:ferry?mode=memory", "sqlite:file:/ferry.db?vfs=memdb"} {
		_, stderr, code := runFerry(t, "events", "list", "--config", writeCLIConfig(t, url, ""))
		if code != exitUsage || !strings.Contains(stderr, "the database is in memory, gone at Close; name a file") || strings.Contains(stderr, "ferry migrate") {
			t.Errorf("%s: exit %d, %q; want %d saying it is in memory, and no ferry migrate", url, code, stderr, exitUsage)
		}
	}
	// A dry run lists every migration as pending, and makes no file either.
	shipped, err := filepath.Glob(filepath.Join("..", "..", "sqlite", "migration", "*.sql"))
	if err != nil || len(shipped) == 0 {
		t.Fatalf("sqlite migrations: %v, %v", shipped, err)
	}
	stdout, stderr, code := runFerry(t, "migrate", "--dry-run", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, path+" does not exist; ferry migrate (without --dry-run) creates it") ||
		!strings.Contains(stdout, "001_initial: ") || !strings.Contains(stdout, fmt.Sprintf("ferry: %d migration(s) pending", len(shipped))) {
		t.Errorf("migrate --dry-run: exit %d, want 0 listing every migration\n%s%s", code, stdout, stderr)
	}
	// In a directory that is not there, the dry run refuses as migrate
	// would, rather than promise a file migrate cannot make.
	noDir := writeCLIConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "no", "ferry.db"), "")
	for _, args := range [][]string{{"migrate", "--dry-run"}, {"migrate"}, {"doctor"}, {"events", "list"}} {
		stdout, stderr, code := runFerry(t, append(args, "--config", noDir)...)
		if code != exitUsage || !strings.Contains(stderr, "store.url: ") || !strings.Contains(stderr, "does not exist: create it") || strings.Contains(stdout, "creates it") {
			t.Errorf("%v in a missing directory: exit %d, want %d naming store.url and the fix\n%s%s", args, code, exitUsage, stdout, stderr)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the refusals, %s: %v; want no file", path, err)
	}
	// migrate makes it, and says so.
	if stdout, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 || !strings.HasPrefix(stdout, "ferry: store.url: made a new, empty store: "+path+"\n") {
		t.Fatalf("migrate: exit %d, want 0 saying it made %s\n%s%s", code, path, stdout, stderr)
	}
	if stdout, _, _ := runFerry(t, "migrate", "--config", cfg); strings.Contains(stdout, "made a new") {
		t.Errorf("migrate again: %q, want no new store", stdout)
	}
	if _, stderr, code := runFerry(t, "events", "list", "--config", cfg); code != 0 {
		t.Errorf("events list after migrate: exit %d: %s", code, stderr)
	}
}

// migrate --dry-run on a PostgreSQL it cannot reach fails (exit 1), even
// when the error is "no such file" (a Unix socket that is not there): only
// a SQLite file that does not exist is a new store to plan.
func TestMigrateDryRunOnUnreachablePostgres(t *testing.T) {
	t.Parallel()
	cfg := writeCLIConfig(t, "postgres://ferry:sekrit@/test?host="+filepath.Join(t.TempDir(), "no-socket-here"), "")
	stdout, stderr, code := runFerry(t, "migrate", "--dry-run", "--config", cfg)
	if code != exitFailed || strings.Contains(stdout, "pending") || !strings.Contains(stderr, "no such file") || strings.Contains(stdout+stderr, "sekrit") {
		t.Errorf("migrate --dry-run on a missing socket: exit %d, want %d with the error and no plan or password\n%s%s", code, exitFailed, stdout, stderr)
	}
}

// A search_path naming no schema that exists is store.url's to fix: migrate,
// its dry run and serve stop with exit 2 naming it (migrate exited 1 with
// PostgreSQL's "no schema has been selected to create in", and the dry run
// planned every migration).
func TestNoSchemaStopsEveryCommand(t *testing.T) {
	t.Parallel()
	cfg := writeCLIConfig(t, pgtest.ConnString("ferry_no_such_schema"), "")
	want := func(what, stdout, stderr string, code int) {
		t.Helper()
		if code != exitUsage || !strings.Contains(stderr, "store.url: ") || !strings.Contains(stderr, "the search_path (ferry_no_such_schema) names no schema that exists") ||
			strings.Contains(stdout, "pending") {
			t.Errorf("%s: exit %d, want %d naming store.url and the search_path\n%s%s", what, code, exitUsage, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"migrate", "--dry-run"}, {"migrate"}} {
		stdout, stderr, code := runFerry(t, append(args, "--config", cfg)...)
		want(strings.Join(args, " "), stdout, stderr, code)
	}
	stderr, code := serveRefused(t, cfg, "--role", "receiver", "--listen", "127.0.0.1:0")
	want("serve", "", stderr, code)
}

// A PostgreSQL (or a proxy in front of it) that takes the connection and
// never answers fails a command after storeConnectTimeout, saying so, rather
// than holding it for as long as TCP lets it.
func TestCommandOnAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	addr, _ := neverAnswers(t)
	cfg := writeCLIConfig(t, "postgres://ferry:sekrit@"+addr+"/test?sslmode=disable", "")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a ceiling only a hang reaches
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, "events", "list", "--config", cfg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitFailed || !strings.Contains(stderr.String(), "the server did not answer within the connect timeout: store.url's connect_timeout or PGCONNECT_TIMEOUT, else 15s") || strings.Contains(stderr.String(), "sekrit") {
		t.Errorf("events list on a server that never answers: %v, want exit %d saying it did not answer within the connect timeout, without the password:\n%s", err, exitFailed, stderr.String())
	}
}

// A PostgreSQL that refuses the connection fails serve and every command
// with exit 1 and the fix doctor gives, naming store.url; doctor says the
// fix once, on its own line.
func TestUnreachablePostgresNamesStoreURL(t *testing.T) {
	t.Parallel()
	ln := testhttp.Listen(t)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: the connection is refused
	cfg := writeCLIConfig(t, "postgres://ferry:sekrit@"+addr+"/test?sslmode=disable", "")
	const fix = ": check store.url, that the database runs and that this host can reach it\n"
	stderr, code := serveRefused(t, cfg, "--role", "receiver", "--listen", "127.0.0.1:0")
	if code != exitFailed || !strings.Contains(stderr, "connect") || !strings.HasSuffix(stderr, fix) || strings.Contains(stderr, "sekrit") {
		t.Errorf("serve on a refused store: exit %d, want %d ending in the fix, without the password:\n%s", code, exitFailed, stderr)
	}
	if _, stderr, code := runFerry(t, "events", "list", "--config", cfg); code != exitFailed || !strings.HasSuffix(stderr, fix) {
		t.Errorf("events list on a refused store: exit %d, want %d ending in the fix:\n%s", code, exitFailed, stderr)
	}
	out, _, code := runFerry(t, "doctor", "--config", cfg)
	if code != exitProblems || strings.Count(out, "check store.url") != 1 || !strings.Contains(out, "      fix: check store.url") {
		t.Errorf("doctor on a refused store: exit %d, want %d with the fix once, on its line:\n%s", code, exitProblems, out)
	}
}

// seedMany stores n pending stripe events evt_00000 ... with 16 senders.
func seedMany(t *testing.T, st ferry.Store, n int) {
	t.Helper()
	ctx := context.Background()
	ids := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id := fmt.Sprintf("evt_%05d", i)
				if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{
					Source: "stripe", EventID: id, Type: "invoice.paid", Payload: []byte(`{"id":"` + id + `"}`),
				}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case ids <- i:
		case err := <-errs:
			close(ids)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(ids)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// events list --all --json prints every one of 2,000 events, once; without
// --all a page ends with the cursor of the next, and the pages add up to
// the same events.
func TestEventsListAll(t *testing.T) {
	t.Parallel()
	const n = 2 * listPageMax // full pages: --all and --before must read past a full page and stop at the end
	onEachCLIStore(t, func(t *testing.T, cfg string, open func(now func() time.Time) seeder) {
		s := open(time.Now)
		seedMany(t, s.store, n)
		s.close()

		lines := listJSON(t, "--config", cfg, "--all")
		seen := map[string]bool{}
		for _, l := range lines {
			seen[l.EventID] = true
		}
		if len(lines) != n || len(seen) != n {
			t.Fatalf("--all --json: %d lines, %d distinct events; want %d", len(lines), len(seen), n)
		}
		if got := len(listJSON(t, "--config", cfg)); got != 100 {
			t.Errorf("without --all: %d events, want the default page of 100", got)
		}

		paged := map[string]bool{}
		args := []string{"events", "list", "--json", "--config", cfg, "--limit", strconv.Itoa(listPageMax)}
		for page := 0; ; page++ {
			if page > n/listPageMax {
				t.Fatalf("more than %d pages", page)
			}
			stdout, stderr, code := runFerry(t, args...)
			if code != 0 {
				t.Fatalf("page %d: exit %d: %s", page, code, stderr)
			}
			for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
				var l eventLine
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatalf("page %d: %q: %v", page, line, err)
				}
				if paged[l.EventID] {
					t.Fatalf("page %d repeats %s", page, l.EventID)
				}
				paged[l.EventID] = true
			}
			m := regexp.MustCompile(`^next: --before (\d+)\n$`).FindStringSubmatch(stderr)
			if m == nil {
				if stderr != "" {
					t.Fatalf("page %d: stderr %q", page, stderr)
				}
				break
			}
			args = append(args[:7], "--before", m[1])
		}
		if len(paged) != n {
			t.Errorf("paging with --before: %d events, want %d", len(paged), n)
		}
	})
}

// doctorJSON runs doctor --json and decodes its report.
func doctorJSON(t *testing.T, cfg string) (doctorReport, int) {
	t.Helper()
	stdout, stderr, code := runFerry(t, "doctor", "--json", "--config", cfg)
	var r doctorReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s\n%s", err, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, "SEKRET") {
		t.Errorf("doctor printed the app URL's token:\n%s\n%s", stdout, stderr)
	}
	return r, code
}

func hasFinding(r doctorReport, level, text string) bool {
	for _, f := range r.Findings {
		if f.Level == level && strings.Contains(f.Message, text) {
			return true
		}
	}
	return false
}

// Doctor exits 4 when a person must act, and 0 on a healthy store.
func TestDoctorNeedsAHuman(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An app that accepts connections, so only the case under test fails.
	app := testhttp.Serve(t, func(net.Conn) {})
	// The app's URL carries a token, which doctor's report must not print.
	forward := fmt.Sprintf("[source.forward]\nurl = \"http://%s/hook?token=SEKRET\"\nsecret = %q\n", app, forwardSecret)
	setup := func(t *testing.T, more ...string) (string, string) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ferry.db")
		cfg := writeTempFile(t, "ferry.toml", fmt.Sprintf("[store]\nurl = %q\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nreplay_window = \"72h\"\nlost_lease = \"hold\"\n%s%s", "sqlite:"+path, forward, strings.Join(more, "")))
		if _, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
			t.Fatalf("migrate: %d %s", code, stderr)
		}
		return path, cfg
	}
	receive := func(t *testing.T, st ferry.Store, id string) {
		if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: id, Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("Healthy", func(t *testing.T) {
		t.Parallel()
		path, cfg := setup(t)
		st := teststore.OpenSQLite(t, path, nil)
		receive(t, st, "evt_ok")
		r, code := doctorJSON(t, cfg)
		if code != 0 || !r.Healthy || !hasFinding(r, "ok", "app at http://"+app) || !hasFinding(r, "ok", "1 pending") {
			t.Errorf("healthy store: exit %d, report %+v; want 0, healthy", code, r)
		}
	})
	t.Run("Dead", func(t *testing.T) {
		t.Parallel()
		path, cfg := setup(t)
		st := teststore.OpenSQLite(t, path, nil)
		receive(t, st, "evt_dead")
		claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "t", Limit: 1, TTL: time.Minute, Sources: []string{"stripe"}})
		if err != nil || len(claims) != 1 {
			t.Fatal(claims, err)
		}
		if _, err := st.EventFail(ctx, &ferry.EventFailParams{Lease: claims[0].Event.Lease(), Error: "boom", Dead: true}); err != nil {
			t.Fatal(err)
		}
		r, code := doctorJSON(t, cfg)
		if code != exitProblems || r.Healthy || !hasFinding(r, "fail", "source stripe: 1 dead event") || hasFinding(r, "fail", "dead events") {
			t.Errorf("one dead event: exit %d, report %+v; want %d and a fail", code, r, exitProblems)
		}
		// The source's counts beside its fail are information, not a pass.
		if !hasFinding(r, "info", "source stripe: 0 pending, 0 in progress, 0 done, 1 dead") || hasFinding(r, "ok", "source stripe: 0 pending") {
			t.Errorf("one dead event: the source's counts are not labelled info: %+v", r)
		}
		if stdout, _, code := runFerry(t, "doctor", "--config", cfg); code != exitProblems || !strings.Contains(stdout, "FAIL  source stripe: 1 dead event\n") ||
			!strings.Contains(stdout, "info  source stripe: 0 pending") || strings.Contains(stdout, "ok    source stripe: 0 pending") {
			t.Errorf("one dead event, text: exit %d:\n%s", code, stdout)
		}
	})
	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		path, cfg := setup(t)
		past := teststore.OpenSQLite(t, path, &sqlite.Config{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		receive(t, past, "evt_unknown")
		if _, err := past.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "gone", Limit: 1, TTL: time.Minute, Sources: []string{"stripe"}}); err != nil {
			t.Fatal(err)
		}
		now := teststore.OpenSQLite(t, path, nil)
		if _, err := now.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "t", Limit: 1, TTL: time.Minute, Sources: []string{"stripe"}, HoldSources: []string{"stripe"}}); err != nil {
			t.Fatal(err)
		}
		if e := eventState(t, now, "evt_unknown"); e == nil || e.State != ferry.StateUnknown {
			t.Fatalf("seed: event = %+v, want unknown", e)
		}
		r, code := doctorJSON(t, cfg)
		if code != exitProblems || r.Healthy || !hasFinding(r, "fail", "1 event held as unknown") {
			t.Errorf("one unknown event: exit %d, report %+v; want %d and a fail", code, r, exitProblems)
		}
	})
	// A source taken out of the config keeps its events; its dead and
	// unknown ones still count and alert until a person resolves them, so
	// they fail as a configured source's do. Its other events only warn.
	t.Run("RetiredSource", func(t *testing.T) {
		t.Parallel()
		path, cfg := setup(t)
		st := teststore.OpenSQLite(t, path, nil)
		for _, id := range []string{"gh_1", "gh_2", "gh_3"} {
			if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "github", EventID: id, Payload: []byte(`{"id":"` + id + `"}`)}); err != nil {
				t.Fatal(err)
			}
		}
		r, code := doctorJSON(t, cfg)
		if code != 0 || !r.Healthy || !hasFinding(r, "warn", "source github: 3 events in the store, but the source is not configured") {
			t.Errorf("a retired source's pending events: exit %d, report %+v; want 0 and a warning", code, r)
		}
		claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "t", Limit: 2, TTL: time.Minute, Sources: []string{"github"}})
		if err != nil || len(claims) != 2 {
			t.Fatal(claims, err)
		}
		for _, c := range claims {
			if _, err := st.EventFail(ctx, &ferry.EventFailParams{Lease: c.Event.Lease(), Error: "gone", Dead: true}); err != nil {
				t.Fatal(err)
			}
		}
		r, code = doctorJSON(t, cfg)
		if code != exitProblems || r.Healthy || !hasFinding(r, "fail", "source github: 2 dead events in the store, but the source is not configured") {
			t.Errorf("a retired source's dead events: exit %d, report %+v; want %d and a fail naming them", code, r, exitProblems)
		}
	})
	t.Run("AtRisk", func(t *testing.T) {
		t.Parallel()
		path, cfg := setup(t)
		old := teststore.OpenSQLite(t, path, &sqlite.Config{Now: func() time.Time { return time.Now().Add(-70 * time.Hour) }})
		receive(t, old, "evt_old") // stripe's window is 72h: at risk after 60h
		r, code := doctorJSON(t, cfg)
		if code != exitProblems || r.Healthy || !hasFinding(r, "fail", "1 event at risk") || len(r.AtRisk) != 1 || r.AtRisk[0].EventID != "evt_old" {
			t.Errorf("one event at risk: exit %d, report %+v; want %d, a fail and the event", code, r, exitProblems)
		}
	})
	// Doctor warns of work due and unclaimed, not of an event waiting out
	// its backoff however old it is.
	t.Run("Backlog", func(t *testing.T) {
		t.Parallel()
		path, cfg := setup(t)
		past := teststore.OpenSQLite(t, path, &sqlite.Config{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		receive(t, past, "evt_backoff")
		claims, err := past.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "t", Limit: 1, TTL: time.Minute, Sources: []string{"stripe"}})
		if err != nil || len(claims) != 1 {
			t.Fatal(claims, err)
		}
		if _, err := past.EventFail(ctx, &ferry.EventFailParams{Lease: claims[0].Event.Lease(), Error: "500", RetryDelay: 2 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		if r, _ := doctorJSON(t, cfg); hasFinding(r, "warn", "has been due") {
			t.Errorf("an event in backoff: report %+v; want no backlog warning", r)
		}
		receive(t, past, "evt_due")
		if r, _ := doctorJSON(t, cfg); !hasFinding(r, "warn", "a pending event has been due for 1h") {
			t.Errorf("an event due for an hour: report %+v; want a backlog warning", r)
		}
	})
	// Catch-up that has not moved its checkpoint for three intervals and
	// 10m (FerryCatchupFailing's age) needs a human; none yet is a warning.
	t.Run("CatchupBehind", func(t *testing.T) {
		t.Parallel()
		path, cfg := setup(t, "[source.catchup]\napi_key = \"sk_test_x\"\ntypes = [\"*\"]\ninterval = \"15m\"\n")
		st := teststore.OpenSQLite(t, path, nil)
		if r, code := doctorJSON(t, cfg); code != 0 || !hasFinding(r, "warn", "source stripe: catch-up has no checkpoint") {
			t.Errorf("no checkpoint: exit %d, report %+v; want 0 and a warning", code, r)
		}
		failed := func() {
			if err := st.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: catchup.FailureName("stripe"), Value: "GET /v1/events: HTTP 401\x1b[2J"}); err != nil {
				t.Fatal(err)
			}
		}
		// Every pass has failed since the start (a wrong key): no checkpoint
		// to age, so the kept failure says it, a warning until the passes
		// have failed for FailingAfter, then a fail.
		failed()
		if r, code := doctorJSON(t, cfg); code != 0 || !hasFinding(r, "warn", `source stripe: catch-up has not ended a pass ok yet; the last pass failed`) || !hasFinding(r, "warn", `HTTP 401\x1b[2J`) {
			t.Errorf("failing since just now: exit %d, report %+v; want 0 and a warning with the error, its escape shown", code, r)
		}
		longAgo := teststore.OpenSQLite(t, path, &sqlite.Config{Now: func() time.Time { return time.Now().Add(-70 * time.Minute) }})
		if err := longAgo.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: catchup.FailingSinceName("stripe")}); err != nil {
			t.Fatal(err)
		}
		if r, code := doctorJSON(t, cfg); code != exitProblems || !hasFinding(r, "fail", `source stripe: catch-up has not ended a pass ok yet, and its passes have failed for 1h10m`) || !hasFinding(r, "fail", `HTTP 401\x1b[2J`) {
			t.Errorf("failing for 70m: exit %d, report %+v; want %d and a fail with the error", code, r, exitProblems)
		}
		put := func(age time.Duration) {
			at := time.Now().Add(-age).UTC().Format(time.RFC3339Nano)
			if err := st.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: catchup.CheckpointName("stripe"), Value: at}); err != nil {
				t.Fatal(err)
			}
		}
		put(56 * time.Minute) // past 3 × 15m + 10m
		if r, code := doctorJSON(t, cfg); code != exitProblems || !hasFinding(r, "fail", "source stripe: catch-up checkpoint 56m") || hasFinding(r, "fail", "the last pass failed") {
			t.Errorf("checkpoint 56m old: exit %d, report %+v; want %d and a fail, the failure before it not shown", code, r, exitProblems)
		}
		failed() // a key revoked later: the age fails, and says why
		if r, code := doctorJSON(t, cfg); code != exitProblems || !hasFinding(r, "fail", "source stripe: catch-up checkpoint 56m") || !hasFinding(r, "fail", "the last pass failed") {
			t.Errorf("checkpoint 56m old, passes failing: exit %d, report %+v; want %d and a fail with the error", code, r, exitProblems)
		}
		put(20 * time.Minute)
		if r, code := doctorJSON(t, cfg); code != 0 || !hasFinding(r, "ok", "source stripe: catch-up checkpoint 20m") {
			t.Errorf("checkpoint 20m old: exit %d, report %+v; want 0 and ok", code, r)
		}
		failed() // since the checkpoint moved
		if r, code := doctorJSON(t, cfg); code != 0 || !hasFinding(r, "warn", "source stripe: catch-up checkpoint 20m") || !hasFinding(r, "warn", "the last pass failed") {
			t.Errorf("a pass failed after the checkpoint moved: exit %d, report %+v; want 0 and a warning", code, r)
		}
	})
	t.Run("AppUnreachable", func(t *testing.T) {
		t.Parallel()
		_, cfg := setup(t)
		closed := freeAddr(t) // nothing listens there
		raw, _ := os.ReadFile(cfg)
		os.WriteFile(cfg, []byte(strings.ReplaceAll(string(raw), app, closed)), 0o600)
		r, code := doctorJSON(t, cfg)
		if code != exitProblems || r.Healthy || !hasFinding(r, "fail", "does not accept connections") {
			t.Errorf("app down: exit %d, report %+v; want %d and a fail", code, r, exitProblems)
		}
		// The fix names the key as a config error does.
		for _, f := range r.Findings {
			if strings.Contains(f.Message, "does not accept connections") && !strings.Contains(f.Fix, "fix source[0] (stripe).forward.url;") {
				t.Errorf("fix %q: want the key as config names it, source[0] (stripe).forward.url", f.Fix)
			}
		}
	})
	// A store that answers but cannot write (sessions read-only, as on a
	// standby after failover) fails, with the fix.
	t.Run("StoreReadOnly", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.Schema(t)
		teststore.PostgresOn(t, pool, nil)
		u, err := url.Parse(pgtest.ConnString(schema))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("options", q.Get("options")+" -c default_transaction_read_only=on")
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		cfg := writeTempFile(t, "ferry.toml", fmt.Sprintf("[store]\nurl = %q\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n%s", u.String(), forward))
		r, code := doctorJSON(t, cfg)
		fixed := false
		for _, f := range r.Findings {
			fixed = fixed || f.Level == "fail" && strings.Contains(f.Message, "answers but cannot write") && strings.Contains(f.Fix, "point store.url at the primary")
		}
		if code != exitProblems || r.Healthy || !fixed {
			t.Errorf("read-only store: exit %d, report %+v; want %d and a fail with the fix", code, r, exitProblems)
		}
	})
	// A store whose sessions would run serializable, or without
	// synchronous commits (here from the URL, which Open refuses) answers
	// and can write, but claims fail, or receipts are not durable: a fail
	// naming the setting and pointing at the error's own fix, not "does
	// not answer".
	t.Run("StoreRefusedAsSet", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.Schema(t)
		teststore.PostgresOn(t, pool, nil)
		for extra, setting := range map[string]string{
			"&default_transaction_isolation=serializable": "default_transaction_isolation",
			"&synchronous_commit=off":                     "synchronous_commit is off",
		} {
			cfg := writeTempFile(t, "ferry.toml", fmt.Sprintf("[store]\nurl = %q\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n%s",
				pgtest.ConnString(schema)+extra, forward))
			r, code := doctorJSON(t, cfg)
			found := false
			for _, f := range r.Findings {
				found = found || f.Level == "fail" && strings.Contains(f.Message, setting) && strings.Contains(f.Fix, "do what the error says")
			}
			if code != exitProblems || r.Healthy || !found {
				t.Errorf("%s: exit %d, report %+v; want %d and a fail naming the setting", extra, code, r, exitProblems)
			}
		}
	})
	// An archive whose partitions end within days: maintenance has not
	// succeeded for a day, a fail that says where to look; kept 7 days
	// ahead, as maintenance keeps it, an ok.
	t.Run("ArchiveBehind", func(t *testing.T) {
		t.Parallel()
		// doctor fails the reach FerryArchiveMaintenanceStopped fires at.
		rules, err := os.ReadFile(filepath.Join("..", "..", "docs", "alerts.yml"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`max\(ferry_archive_ahead_seconds\) < (\d+) \* 86400`).FindSubmatch(rules)
		if m == nil || string(m[1]) != strconv.Itoa(int((ferry.ArchiveAheadDefault-archiveBehind)/(24*time.Hour))) {
			t.Errorf("FerryArchiveMaintenanceStopped's reach is %q days; doctor fails under %s", m, ferry.ArchiveAheadDefault-archiveBehind)
		}
		for _, tc := range []struct {
			ahead time.Duration
			level string
			text  string
		}{
			{0, "warn", "no partition yet"}, // migrated, never served
			{time.Hour, "fail", "no run has succeeded for a day"},
			{ferry.ArchiveAheadDefault, "ok", "archive: "},
		} {
			pool, schema := pgtest.Schema(t)
			st := teststore.PostgresOn(t, pool, nil)
			if tc.ahead > 0 {
				if _, err := st.ArchiveMaintain(context.Background(), &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour, Ahead: tc.ahead}); err != nil {
					t.Fatal(err)
				}
			}
			cfg := writeTempFile(t, "ferry.toml", fmt.Sprintf("[store]\nurl = %q\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n%s", pgtest.ConnString(schema), forward))
			if r, _ := doctorJSON(t, cfg); !hasFinding(r, tc.level, tc.text) {
				t.Errorf("partitions %s ahead: report %+v; want a %s finding %q", tc.ahead, r.Findings, tc.level, tc.text)
			}
		}
	})
	// A login the server refuses is a fail naming the user and the fix,
	// as serve's exit 2 does, not "does not answer".
	t.Run("StoreRefusesTheLogin", func(t *testing.T) {
		t.Parallel()
		u, err := url.Parse(pgtest.URL())
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User("ferry_no_such_role")
		cfg := writeTempFile(t, "ferry.toml", fmt.Sprintf("[store]\nurl = %q\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n%s", u.String(), forward))
		r, code := doctorJSON(t, cfg)
		found := false
		for _, f := range r.Findings {
			found = found || f.Level == "fail" && strings.Contains(f.Message, `refused the login of user "ferry_no_such_role"`) && strings.Contains(f.Fix, "do what the error says")
		}
		if code != exitProblems || r.Healthy || !found {
			t.Errorf("login refused: exit %d, report %+v; want %d and a fail naming the user", code, r, exitProblems)
		}
	})
	t.Run("StoreUnreachable", func(t *testing.T) {
		t.Parallel()
		cfg := writeTempFile(t, "ferry.toml", fmt.Sprintf("[store]\nurl = \"postgres://ferry@%s/none?connect_timeout=2\"\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n%s", freeAddr(t), forward))
		r, code := doctorJSON(t, cfg)
		if code != exitProblems || r.Healthy || !hasFinding(r, "fail", "store: ") {
			t.Errorf("store down: exit %d, report %+v; want %d and a fail", code, r, exitProblems)
		}
	})
}

// migrateCLI writes a CLI config (writeCLIConfig) for storeURL and runs
// `ferry migrate` with it, returning the config's path.
func migrateCLI(t *testing.T, storeURL string) string {
	t.Helper()
	cfg := writeCLIConfig(t, storeURL, "")
	if _, stderr, code := runFerry(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	return cfg
}

// migratedSQLite returns the config of a migrated SQLite store and a
// seeder open on it, on the wall clock.
func migratedSQLite(t *testing.T) (cfg string, s seeder) {
	t.Helper()
	cfg, open := cliStores()[0].migrated(t)
	return cfg, open(time.Now)
}

// serve logs durations as strings, in JSON and in text (--log-format).
func TestServeLogFormat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, "sqlite:"+filepath.Join(dir, "ferry.db"), "http://"+freeAddr(t)+"/hook", "")

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		p := startServe(t, cfg, "--role", "receiver")
		if code := sendStripe(t, p.addr, "evt_log_json"); code != 200 {
			t.Fatalf("send: %d", code)
		}
		var latency any
		waitFor(t, 30*time.Second, "the webhook log line", func() bool {
			for _, line := range strings.Split(p.log(), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "ferry: webhook" {
					latency = rec["latency"]
					return true
				}
			}
			return false
		})
		s, ok := latency.(string)
		if _, err := time.ParseDuration(s); !ok || err != nil {
			t.Errorf("latency logged as %#v (%T), want a duration string like \"1.5ms\"", latency, latency)
		}
	})
	t.Run("Text", func(t *testing.T) {
		t.Parallel()
		p := startWalkProc(t, dir, []string{"serve", "--config", cfg, "--role", "receiver", "--listen", "127.0.0.1:0", "--log-format", "text"}, `msg="ferry: serving"`)
		t.Cleanup(func() { p.stop(t, "serve") })
		if !regexp.MustCompile(`(?m)^time=\S+ level=INFO msg="ferry: serving" listen=127\.0\.0\.1:\d+ `).MatchString(p.output()) {
			t.Errorf("--log-format text: no key=value serving line:\n%s", p.output())
		}
	})
	t.Run("Bad", func(t *testing.T) {
		t.Parallel()
		if _, stderr, code := runFerry(t, "serve", "--config", cfg, "--log-format", "xml"); code != exitUsage || !strings.Contains(stderr, "use text or json") {
			t.Errorf("--log-format xml: exit %d, stderr %q; want %d and the choices", code, stderr, exitUsage)
		}
	})
}

// neverAnswers is the address of a server that takes every connection and
// never answers, and a channel that receives once it has taken the first.
func neverAnswers(t *testing.T) (addr string, taken <-chan struct{}) {
	ln := testhttp.Listen(t)
	first := make(chan struct{})
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if held = append(held, c); len(held) == 1 {
				close(first)
			}
		}
	}()
	return ln.Addr().String(), first
}
