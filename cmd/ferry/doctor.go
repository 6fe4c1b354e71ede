package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/ferry-inbox/ferry"
)

// doctorBacklog is the age of the oldest pending event past which doctor
// warns that workers are behind or not running.
const doctorBacklog = 5 * time.Minute

// runDoctor checks the config, the store and the events in it, printing one
// line per finding with its fix. It exits 0 when nothing is wrong, 4 when
// something is (FAIL) and 2 when the config does not load.
func runDoctor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return doctor(ctx, *configPath, os.Stdout)
}

func doctor(ctx context.Context, configPath string, out io.Writer) error {
	fails := 0
	ok := func(format string, args ...any) { fmt.Fprintf(out, "ok    "+format+"\n", args...) }
	warn := func(fix, format string, args ...any) {
		fmt.Fprintf(out, "WARN  "+format+"\n      fix: %s\n", append(args, fix)...)
	}
	fail := func(fix, format string, args ...any) {
		fails++
		fmt.Fprintf(out, "FAIL  "+format+"\n      fix: %s\n", append(args, fix)...)
	}

	cfg, err := loadConfig(configPath)
	if err != nil {
		return err // exit 2 with every bad key and its fix
	}
	ok("config %s: %d sources", configPath, len(cfg.Sources))
	for i, s := range cfg.Sources {
		if s.Forward.URL == "" {
			warn(fmt.Sprintf("set source[%d].forward.url, or run this config only with serve --role receiver", i),
				"source %s: no forward.url; a worker cannot deliver its events", s.Name)
			continue
		}
		u, _ := url.Parse(s.Forward.URL)
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", host)
		if err != nil {
			warn("start the app, or fix source."+s.Name+".forward.url; events wait and retry meanwhile",
				"source %s: the app at %s does not accept connections: %v", s.Name, u.Redacted(), err)
			continue
		}
		conn.Close()
		ok("source %s: app at %s accepts connections", s.Name, u.Redacted())
	}

	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, closeStore, err := openStore(pctx, cfg)
	if err != nil {
		fail("check store.url, that the database runs and that this host can reach it", "store: %v", err)
		return doctorResult(fails)
	}
	defer closeStore()
	if err := st.Ping(pctx); err != nil {
		fail("check that the database runs and that this host can reach it", "store: does not answer: %v", err)
		return doctorResult(fails)
	}
	kind, _, _ := cfg.StoreKind()
	ok("store: %s answers", kind)

	stats, err := st.EventStats(pctx, cfg.StatsParams(5))
	if err != nil {
		fail("run: ferry migrate --config "+configPath, "store: cannot read events (schema missing or out of date?): %v", err)
		return doctorResult(fails)
	}
	ok("store: schema readable, database clock %s", stats.Now.Format(time.RFC3339))

	configured := map[string]bool{}
	for _, s := range cfg.Sources {
		configured[s.Name] = true
	}
	for _, s := range stats.Sources {
		age := func(t time.Time) time.Duration { return stats.Now.Sub(t).Round(time.Second) }
		if !configured[s.Source] {
			warn("add a [[source]] named "+s.Source+" back, or leave them: no worker here will process them",
				"source %s: %d events in the store, but the source is not configured", s.Source, s.Total())
		}
		if s.AtRisk > 0 {
			fail(fmt.Sprintf("make them succeed before the provider's replay window ends: ferry events list --at-risk --source %s; fix the handler or app, then ferry events replay", s.Source),
				"source %s: %d events at risk, oldest received %s ago, unfinished and close to outliving the replay window", s.Source, s.AtRisk, age(s.OldestAtRisk))
		}
		if n := s.States[ferry.StateDead]; n > 0 {
			warn(fmt.Sprintf("ferry events list --state dead --source %s; fix the cause, then ferry events replay --state dead --source %s", s.Source, s.Source),
				"source %s: %d dead events", s.Source, n)
		}
		if n := s.States[ferry.StateUnknown]; n > 0 {
			warn(fmt.Sprintf("check the app for each (ferry events show %s ID), then replay the ones that did not happen", s.Source),
				"source %s: %d events held as unknown: a lease was lost while their effect may have run", s.Source, n)
		}
		if s.LeaseExpired > 0 {
			warn("make sure a worker runs (ferry serve --role worker or all); it takes these back on its next claim",
				"source %s: %d in-progress events whose worker stopped heartbeating", s.Source, s.LeaseExpired)
		}
		if !s.OldestPending.IsZero() && age(s.OldestPending) > doctorBacklog {
			warn("make sure a worker runs and the app answers; see ferry events list --state pending --source "+s.Source,
				"source %s: the oldest pending event has waited %s", s.Source, age(s.OldestPending))
		}
		ok("source %s: %d pending, %d in progress, %d done, %d dead, %d unknown", s.Source,
			s.States[ferry.StatePending], s.States[ferry.StateInProgress], s.States[ferry.StateDone], s.States[ferry.StateDead], s.States[ferry.StateUnknown])
	}
	for _, e := range stats.AtRisk {
		fmt.Fprintf(out, "      at risk: %s %s (%s, attempt %d, received %s)\n", e.Source, e.EventID, e.State, e.Attempt, e.FirstDeliveredAt.Format(time.RFC3339))
	}
	return doctorResult(fails)
}

func doctorResult(fails int) error {
	if fails == 0 {
		return nil
	}
	return &exitError{exitProblems, fmt.Errorf("%d problems need attention", fails)}
}
