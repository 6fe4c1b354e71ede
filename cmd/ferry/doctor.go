package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/catchup"
	"github.com/ferry-inbox/ferry/internal/config"
)

// misconfiguredFix is doctor's fix for a store whose sessions run with a
// setting Ferry's statements fail under, or as a role that may not write
// its tables, found by Ping (set or revoked while serve runs).
const misconfiguredFix = "do what the error says, for Ferry's role or in store.url; what it names fails meanwhile, and ferry serve refuses to start until then"

// doctorBacklog is how long a pending event may stay due, unclaimed, before
// doctor warns that workers are behind or not running. An event waiting out
// a backoff is not due: one the app keeps failing is not a backlog.
const doctorBacklog = 5 * time.Minute

// runDoctor checks the config, the store and the events in it, printing one
// line per finding with its fix. It exits 0 when nothing is wrong, 4 when
// something is (FAIL) and 2 when the config does not load or its store.url
// names no store (a SQLite file that is not there), as every command does.
func runDoctor(ctx context.Context, args []string) error {
	fs := newFlags("doctor", "[--config FILE] [--role ROLE] [--json]",
		`Checks the config, each source's app, the store and the events in it, and prints
what is wrong with its fix. Exits 4 when anything needs a human: a dead, unknown
or at-risk event, an app that does not accept connections, a store it cannot
reach or read, a source with no forward.url for a role that runs workers.
Exits 0 when all is well, 2 when the config does not load or store.url names a
SQLite file that is not there. Give --role as serve is given it.`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	role := fs.String("role", "all", roleUsage)
	asJSON := fs.Bool("json", false, "print one JSON object: every finding, the events at risk, and whether anything needs a human")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	_, runsWorker, err := parseRole(*role)
	if err != nil {
		return err
	}
	return doctor(ctx, *configPath, runsWorker, *asJSON, os.Stdout)
}

// finding is one line of doctor's report.
type finding struct {
	// Level is ok, info (a source's counts beside its warn or fail
	// findings: neither a pass nor a problem of its own), warn (worth a
	// look; nothing is lost meanwhile) or fail (a human must act: exit 4).
	Level   string `json:"level"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// doctorReport is doctor --json.
type doctorReport struct {
	// Healthy is false when any finding is a fail; doctor then exits 4.
	Healthy  bool        `json:"healthy"`
	Findings []finding   `json:"findings"`
	AtRisk   []eventLine `json:"at_risk"`
}

func doctor(ctx context.Context, configPath string, runsWorker, asJSON bool, out io.Writer) error {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err // exit 2 with every bad key and its fix
	}
	report := &doctorReport{Findings: []finding{}, AtRisk: []eventLine{}}
	add := func(level, fix, format string, args ...any) {
		f := finding{Level: level, Message: fmt.Sprintf(format, args...), Fix: fix}
		report.Findings = append(report.Findings, f)
		if asJSON {
			return
		}
		fmt.Fprintf(out, "%-5s %s\n", map[string]string{"ok": "ok", "info": "info", "warn": "WARN", "fail": "FAIL"}[level], f.Message)
		if fix != "" {
			fmt.Fprintf(out, "      fix: %s\n", fix)
		}
	}
	ok := func(format string, args ...any) { add("ok", "", format, args...) }
	warn := func(fix, format string, args ...any) { add("warn", fix, format, args...) }
	fail := func(fix, format string, args ...any) { add("fail", fix, format, args...) }
	info := func(format string, args ...any) { add("info", "", format, args...) }
	err = doctorCheck(ctx, cfg, configPath, runsWorker, ok, info, warn, fail, report)
	if errors.Is(err, errConfig) {
		return err // as a config that does not load: no report
	}
	report.Healthy = countLevel(report.Findings, "fail") == 0
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else {
		for _, e := range report.AtRisk {
			fmt.Fprintf(out, "      at risk: %s %s (%s, attempt %d, received %s)\n", e.Source, e.EventID, e.State, e.Attempt, e.ReceivedAt.Format(time.RFC3339))
		}
	}
	if err != nil {
		return err
	}
	if !report.Healthy {
		n := countLevel(report.Findings, "fail")
		if n == 1 {
			return &exitError{exitProblems, errors.New("1 problem needs a human")}
		}
		return &exitError{exitProblems, fmt.Errorf("%d problems need a human", n)}
	}
	return nil
}

// countOf is n and noun, plural unless n is 1: "1 dead event", "3 dead
// events".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// heldEvents counts a source's dead and unknown events, the ones a person
// must replay or resolve: "2 dead events and 1 event held as unknown"; ""
// when there are none.
func heldEvents(s *ferry.SourceStats) string {
	var parts []string
	if n := s.States[ferry.StateDead]; n > 0 {
		parts = append(parts, countOf(n, "dead event"))
	}
	if n := s.States[ferry.StateUnknown]; n > 0 {
		parts = append(parts, countOf(n, "event")+" held as unknown")
	}
	return strings.Join(parts, " and ")
}

func countLevel(fs []finding, level string) int {
	n := 0
	for _, f := range fs {
		if f.Level == level {
			n++
		}
	}
	return n
}

// okFunc reports a check passed; fixFunc a finding and its fix.
type (
	okFunc  func(format string, args ...any)
	fixFunc func(fix, format string, args ...any)
)

// doctorCheck runs the checks in order, stopping at a store it cannot use.
// Each source's app is checked when runsWorker: a receiver forwards nothing.
func doctorCheck(ctx context.Context, cfg *config.Config, configPath string, runsWorker bool, ok, info okFunc, warn, fail fixFunc, r *doctorReport) error {
	octx, cancelOpen := context.WithTimeout(ctx, 5*time.Second)
	defer cancelOpen()
	st, closeStore, err := openStore(octx, cfg, nil, existingStore)
	kind, _, _ := cfg.StoreKind()
	if errors.Is(err, errConfig) && (errors.Is(err, fs.ErrNotExist) || kind == "sqlite" && errors.Is(err, ferry.ErrInvalidParams)) {
		// A store.url naming no SQLite file, or a path no SQLite file can
		// be at: the config error, key and fix, every command gives (exit
		// 2), before any line of a report. A store refused as set (fsync or
		// synchronous_commit off, often the server's doing) stays a finding
		// below: exit 4, with the report.
		return err
	}
	ok("config %s: %s", configPath, countOf(len(cfg.Sources), "source"))
	if runsWorker {
		doctorApps(ctx, cfg, ok, fail)
	}

	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if errors.Is(err, ferry.ErrMisconfigured) || errors.Is(err, ferry.ErrNotDurable) { // found by Open: serve would not start either
		fail("do what the error says, in store.url or on the server; ferry serve and every command refuse the store until then", "store: %v", err)
		return nil
	}
	if err != nil {
		if unreachable, ok := errors.AsType[*unreachableError](err); ok {
			err = unreachable.err // the fix goes on its own line
		}
		fail(storeUnreachableFix, "store: %v", err)
		return nil
	}
	defer closeStore()
	if err := st.Ping(pctx); errors.Is(err, ferry.ErrReadOnly) {
		fix := "point store.url at the primary (a standby after failover?), or reset default_transaction_read_only for Ferry's role or database, as the error says; every delivery gets 503 meanwhile"
		if kind == "sqlite" {
			fix = "make the database file and its directory writable by the user ferry runs as (this check ran as doctor's user: run doctor as ferry's); every delivery gets 503 meanwhile"
		}
		fail(fix, "store: answers but cannot write: %v", err)
		return nil
	} else if errors.Is(err, ferry.ErrMisconfigured) {
		fail(misconfiguredFix, "store: answers but is misconfigured: %v", err)
		return nil
	} else if err != nil {
		fail("check that the database runs and that this host can reach it", "store: does not answer: %v", err)
		return nil
	}
	ok("store: %s answers and can write", kind)

	// A migration in progress holds the plan back until it commits: a
	// warning, with time left for the checks below.
	planCtx, cancelPlan := context.WithTimeout(pctx, 2*time.Second)
	steps, err := st.MigratePlan(planCtx)
	cancelPlan()
	switch {
	case errors.Is(err, ferry.ErrSchemaNewer):
		fail("roll forward: deploy the ferry that migrated the store again", "store: %v", err)
		return nil
	case errors.Is(err, context.DeadlineExceeded) && pctx.Err() == nil:
		warn("check again once it ends", "store: a migration is in progress (its lock held for more than 2s)")
	}
	stats, err := st.EventStats(pctx, cfg.StatsParams(5))
	if err != nil {
		fail(migrateFix(steps, "ferry migrate --config "+configPath), "store: cannot read events (schema missing or out of date?): %v", err)
		return nil
	}
	if len(steps) > 0 {
		warn(migrateFix(steps, "ferry migrate --config "+configPath), "%s", lacking(steps))
	}
	ok("store: schema readable, database clock %s", stats.Now.Format(time.RFC3339))
	checkArchive(pctx, st, ok, warn, fail)

	configured := map[string]bool{}
	for _, s := range cfg.Sources {
		configured[s.Name] = true
	}
	for _, s := range stats.Sources {
		age := func(t time.Time) time.Duration { return stats.Now.Sub(t).Round(time.Second) }
		if !configured[s.Source] {
			// Its events wait for no worker, and replay refuses them: the
			// fixes below would not run. Its dead and unknown events still
			// count in ferry_events and keep their alerts firing until a
			// person resolves them, as a configured source's do.
			if held := heldEvents(s); held != "" {
				fail(fmt.Sprintf("list them (ferry events list --source %s --state dead,unknown) and close them with ferry events resolve %s ID..., or add a [[source]] named %s back and replay them: until then they count as dead and unknown, and alert", s.Source, s.Source, s.Source),
					"source %s: %s in the store, but the source is not configured", s.Source, held)
				continue
			}
			warn("add a [[source]] named "+s.Source+" back: no worker here will process its events",
				"source %s: %s in the store, but the source is not configured", s.Source, countOf(s.Total(), "event"))
			continue
		}
		found := len(r.Findings)
		if s.AtRisk > 0 {
			fail(fmt.Sprintf("make them succeed before the provider's replay window ends: ferry events list --at-risk --source %s; fix the handler or app, then ferry events retry-now %s ID... (or wait for their next attempt); an unknown one: check the downstream, then ferry events replay or resolve it", s.Source, s.Source),
				"source %s: %s at risk, oldest received %s ago, unfinished and close to outliving the replay window", s.Source, countOf(s.AtRisk, "event"), age(s.OldestAtRisk))
		}
		if n := s.States[ferry.StateDead]; n > 0 {
			fail(fmt.Sprintf("ferry events list --state dead --source %s; fix the cause, then ferry events replay --state dead --source %s", s.Source, s.Source),
				"source %s: %s", s.Source, countOf(n, "dead event"))
		}
		if n := s.States[ferry.StateUnknown]; n > 0 {
			fail(fmt.Sprintf("check the app for each (ferry events show %s ID), then replay the ones that did not happen (ferry events replay %s ID...) and resolve the ones that did (ferry events resolve %s ID...)", s.Source, s.Source, s.Source),
				"source %s: %s held as unknown: a lease was lost while their effect may have run", s.Source, countOf(n, "event"))
		}
		if s.LeaseExpired > 0 {
			warn("make sure a worker runs (ferry serve --role worker or all); it takes these back on its next claim",
				"source %s: %s whose worker stopped heartbeating", s.Source, countOf(s.LeaseExpired, "in-progress event"))
		}
		if !s.OldestDue.IsZero() && age(s.OldestDue) > doctorBacklog {
			warn("make sure a worker runs; see ferry events list --state pending --source "+s.Source,
				"source %s: a pending event has been due for %s and no worker took it", s.Source, age(s.OldestDue))
		}
		summary := ok
		if len(r.Findings) > found {
			summary = info // a count beside the source's warnings, not a pass
		}
		summary("source %s: %d pending, %d in progress, %d done, %d dead, %d unknown", s.Source,
			s.States[ferry.StatePending], s.States[ferry.StateInProgress], s.States[ferry.StateDone], s.States[ferry.StateDead], s.States[ferry.StateUnknown])
	}
	for _, s := range cfg.Sources {
		every := s.Catchup.LoopInterval()
		if every == 0 {
			continue
		}
		reconcile := "ferry reconcile --source " + s.Name + " --dry-run prints why a pass fails (a revoked key, a missing scope); serve's 'catchup: pass failed' names the instance"
		_, at, err := catchup.ReadCheckpoint(pctx, st, s.Name)
		failure, ferr := catchup.ReadFailure(pctx, st, s.Name)
		if ferr != nil {
			warn(reconcile, "source %s: catch-up's last failure unreadable: %v", s.Name, ferr)
		}
		lastFailed := "" // "; the last pass failed ... ago: ERROR"
		if failure != nil {
			lastFailed = fmt.Sprintf("; the last pass failed %s ago: %s", stats.Now.Sub(failure.At).Round(time.Second), oneLine(failure.Err, 300))
		}
		switch age := stats.Now.Sub(at).Round(time.Second); {
		case errors.Is(err, ferry.ErrNotFound) && failure != nil && stats.Now.Sub(failure.Since) > catchup.FailingAfter(every):
			fail(reconcile+"; events the provider never delivered are not fetched meanwhile",
				"source %s: catch-up has not ended a pass ok yet, and its passes have failed for %s, past %s (three intervals and 10m)%s", s.Name, stats.Now.Sub(failure.Since).Round(time.Second), catchup.FailingAfter(every), lastFailed)
		case errors.Is(err, ferry.ErrNotFound) && failure != nil:
			warn(reconcile, "source %s: catch-up has not ended a pass ok yet%s", s.Name, lastFailed)
		case errors.Is(err, ferry.ErrNotFound):
			warn("serve runs a pass at start and every interval; if one runs, "+reconcile,
				"source %s: catch-up has no checkpoint: no pass has ended ok yet", s.Name)
		case err != nil:
			warn(reconcile, "source %s: catch-up checkpoint unreadable: %v", s.Name, err)
		case age > catchup.FailingAfter(every):
			fail(reconcile+"; events the provider never delivered are not fetched meanwhile",
				"source %s: catch-up checkpoint %s old, past %s (three intervals and 10m): its passes fail or none runs%s", s.Name, age, catchup.FailingAfter(every), lastFailed)
		case failure != nil:
			warn(reconcile, "source %s: catch-up checkpoint %s old%s", s.Name, age, lastFailed)
		default:
			ok("source %s: catch-up checkpoint %s old", s.Name, age)
		}
	}
	isAtRisk := atRiskFunc(cfg, stats.Now)
	for _, e := range stats.AtRisk {
		r.AtRisk = append(r.AtRisk, newEventLine(e, isAtRisk(e)))
	}
	return nil
}

// archiveBehind is how far short of ArchiveMaintainParams.Ahead's default
// the archive's reach may fall before doctor fails it: a day of hourly
// runs without one success, as FerryArchiveMaintenanceStopped's 6 days.
const archiveBehind = 24 * time.Hour

// checkArchive reports a partitioned archive that maintenance no longer
// keeps ahead: once its partitions run out, completions land in the
// default partition and retention drops no day.
func checkArchive(ctx context.Context, st ferry.Store, ok func(format string, args ...any), warn, fail func(fix, format string, args ...any)) {
	info, err := st.ArchiveInfo(ctx)
	const why = "serve's 'archive maintenance failed' line says why (permission denied: run as the role that owns Ferry's tables); no instance with a worker (serve --role worker or all) means no run"
	switch {
	case err != nil:
		warn("check again; "+why, "archive: cannot read its partitions: %v", err)
	case !info.Partitioned:
	case info.Partitions == 0:
		warn("start serve, whose archive maintenance makes them at start and hourly; if it has run, "+why,
			"archive: no partition yet; completions land in the default partition")
	case info.End.Sub(info.Now) < ferry.ArchiveAheadDefault-archiveBehind:
		fail(why, "archive: its partitions end %s ahead (maintenance keeps %s): no run has succeeded for a day",
			max(0, info.End.Sub(info.Now)).Round(time.Minute), ferry.ArchiveAheadDefault)
	default:
		ok("archive: %d partitions, ending %s ahead", info.Partitions, info.End.Sub(info.Now).Round(time.Hour))
	}
}

// doctorApps checks that each source's app accepts connections, as a
// worker needs.
func doctorApps(ctx context.Context, cfg *config.Config, ok okFunc, fail fixFunc) {
	for i, s := range cfg.Sources {
		if s.Forward.URL == "" {
			// serve refuses to start its workers (missingForward).
			fail("set "+config.SourceKey(i, s.Name)+".forward.url, or run this config only with serve --role receiver (and doctor --role receiver)",
				"source %s: no forward.url; serve will not start a worker, which would have nowhere to deliver its events", s.Name)
			continue
		}
		u, _ := url.Parse(s.Forward.URL)
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", host)
		if err != nil {
			fail("start the app, or fix "+config.SourceKey(i, s.Name)+".forward.url; events wait and retry meanwhile, and die when their attempts run out",
				"source %s: the app at %s does not accept connections: %v", s.Name, config.RedactURL(s.Forward.URL), err)
			continue
		}
		conn.Close()
		ok("source %s: app at %s accepts connections", s.Name, config.RedactURL(s.Forward.URL))
	}
}
