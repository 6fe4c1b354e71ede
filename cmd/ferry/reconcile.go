package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/catchup"
	"github.com/ferry-inbox/ferry/internal/config"
)

func runReconcile(ctx context.Context, args []string) error {
	return reconcile(ctx, args, os.Stdout, os.Stderr)
}

// reconcile runs one catch-up pass by hand: after an outage, or to look
// further back than the loop does (--since).
func reconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("reconcile", "--source NAME [--since 24h] [--dry-run] [--json]",
		`Runs one catch-up pass of a source's [source.catchup] by hand: lists what the
provider sent since the checkpoint (or --since), receives what the store lacks,
and advances the checkpoint when the window covers it.`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	source := fs.String("source", "", "the source `name` to catch up (required)")
	since := fs.Duration("since", 0, "look back this far instead of from the checkpoint (e.g. 24h)")
	dryRun := fs.Bool("dry-run", false, "list and count by id, but fetch and receive nothing and leave the checkpoint (so skipped stays 0: what a pass would skip counts as new)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	if *source == "" {
		return usagef("--source is required: name a source with a [source.catchup] table")
	}
	if *since < 0 {
		return usagef("--since %v: use a positive duration like 24h", *since)
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	runner, err := newCatchupRunner(cfg, *source, nil, slog.New(slog.NewTextHandler(stderr, nil)), nil)
	if err != nil {
		return err
	}
	st, closeStore, err := openStore(ctx, cfg, nil, existingStore)
	if err != nil {
		return err
	}
	defer closeStore()
	if err := requireCurrentSchema(ctx, st); err != nil {
		return err
	}
	runner.Store = st

	res, err := runner.Pass(ctx, catchup.PassOptions{Since: *since, DryRun: *dryRun})
	if res == nil && *asJSON {
		res = &catchup.Result{Source: *source} // a pass that failed before its window
	}
	if res != nil {
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(reconcileReport{Result: res, Failed: err != nil})
		} else {
			for _, w := range res.Warnings {
				fmt.Fprintf(stdout, "warning: %s\n", w)
			}
			fmt.Fprintf(stdout, "window: %s to %s; checkpoint %s\n", res.From.Format(time.RFC3339), res.To.Format(time.RFC3339), advanced(res, err))
			outcome := ""
			if err != nil {
				outcome = " failed=true"
			}
			fmt.Fprintf(stdout, "reconcile: source=%s%s fetched=%d new=%d known=%d skipped=%d\n", res.Source, outcome, res.Fetched, res.New, res.Known, res.Skipped)
		}
	}
	return nameRefusedKey(cfg, *source, err)
}

// reconcileReport is --json's output: the pass's result, and whether it
// failed (the error itself goes to stderr, as without --json).
type reconcileReport struct {
	*catchup.Result
	Failed bool `json:"failed"`
}

func advanced(res *catchup.Result, err error) string {
	switch {
	case res.DryRun:
		return "left (dry run)"
	case res.Advanced:
		return "advanced to " + res.Checkpoint.Format(time.RFC3339)
	case err != nil:
		return "left: the pass failed"
	}
	return "left: the window did not reach back to it"
}

// nameRefusedKey names the setting to fix when the provider's API
// answered a pass with 401 or 403 in its own JSON, or GitHub's with 404
// (a hook or installation that does not exist, or credentials that may not
// see it): catchup cannot, as it does not know the config's keys. A 401 or
// 403 that is not JSON is a proxy's or gateway's page, no verdict on the
// key: the key is not blamed. Nor is it, or the hook, for one event the
// provider refused for now in a pass that listed with them.
func nameRefusedKey(cfg *config.Config, name string, err error) error {
	if errors.Is(err, catchup.ErrRefusedForNow) {
		return err
	}
	se, ok := errors.AsType[*catchup.StatusError](err)
	if ok && se.Status == http.StatusNotFound && !se.NotJSON {
		if keys := cfg.CatchupNotFoundKeys(name); keys != "" {
			return fmt.Errorf("%w: GitHub answers 404 for a hook or installation that does not exist, and to credentials that may not read it: check %s", err, keys)
		}
	}
	if !ok || se.RateLimited || (se.Status != http.StatusUnauthorized && se.Status != http.StatusForbidden) {
		return err
	}
	if se.NotJSON {
		return fmt.Errorf("%w: not the provider's own answer: check the proxy or gateway between this host and the API (HTTPS_PROXY?)", err)
	}
	key := cfg.CatchupCredentialsKey(name)
	if key == "" {
		return err
	}
	return fmt.Errorf("%w: the provider's API refused %s: check it, and that it may read what catch-up lists", err, key)
}

// newCatchupRunner builds the runner of the named source; st may be set
// later.
func newCatchupRunner(cfg *config.Config, name string, st ferry.Store, log *slog.Logger, obs catchup.Observer) (*catchup.Runner, error) {
	s, err := sourceFlag(cfg, name)
	if err != nil {
		return nil, err
	}
	rec, err := s.Reconciler()
	if err != nil {
		return nil, fmt.Errorf("%w: source %s: %v", errConfig, name, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: source %s has no [source.catchup] table: add one with api_key and types (Stripe) or token and hook (GitHub); see docs/configuration.md", errConfig, name)
	}
	return &catchup.Runner{Source: name, Reconciler: rec, Store: st, Lookback: s.Catchup.Lookback.Duration,
		Retention: s.Retention.Duration, MaxBody: s.MaxBody, Logger: log, Observer: obs}, nil
}

// startCatchup runs the catch-up loop of every source that has one, in bg,
// until ctx is done.
func startCatchup(ctx context.Context, bg *sync.WaitGroup, cfg *config.Config, st ferry.Store, log *slog.Logger, obs catchup.Observer, owner string) error {
	for _, s := range cfg.Sources {
		if s.Catchup.LoopInterval() == 0 {
			continue
		}
		r, err := newCatchupRunner(cfg, s.Name, st, log, obs)
		if err != nil {
			return err
		}
		bg.Go(func() {
			if err := r.Run(ctx, s.Catchup.Interval.Duration, owner); err != nil {
				log.Error("catchup: not running", "source", s.Name, "error", err.Error())
			}
		})
	}
	return nil
}

// instanceName names this process as a lease owner: host, pid and a random
// suffix, so a restarted process on a reused pid is a new owner.
func instanceName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1_000_000)
}
