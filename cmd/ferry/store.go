package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
)

// errConfig marks a configuration the command refuses to start with (exit 2).
var errConfig = errors.New("config")

// errUpgrade marks an upgrade step serve leaves to the operator (exit 2):
// a migration older instances cannot run beside.
var errUpgrade = errors.New("upgrade")

// configError is a config that does not load: exit 2. Its text is the
// cause's alone, so a message carries one prefix ("ferry.toml: config
// invalid: ...", "open ferry.toml: no such file or directory").
type configError struct{ err error }

func (e *configError) Error() string        { return e.err.Error() }
func (e *configError) Unwrap() error        { return e.err }
func (e *configError) Is(target error) bool { return target == errConfig }

func loadConfig(path string, overrides ...func(*config.Config)) (*config.Config, error) {
	c, err := config.Load(path, overrides...)
	var unreadable *fs.PathError
	switch {
	case errors.As(err, &unreadable): // it names the file already
		return nil, &configError{fmt.Errorf("%w (name the config file with --config FILE)", unreadable)}
	case err != nil:
		return nil, &configError{fmt.Errorf("%s: %w", path, err)}
	}
	return c, nil
}

// configured is what a command that works on the store alone opens: the
// config and its store (the events subcommands).
type configured struct {
	cfg   *config.Config
	store ferry.Store
	close func()
}

// openConfigured loads the config at configPath and opens its store.
// source is the command's --source ("" when none was given), which must
// name a configured source.
func openConfigured(ctx context.Context, configPath, source string, use storeUse) (*configured, error) {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return nil, err
	}
	if source != "" {
		if _, err := sourceFlag(cfg, source); err != nil {
			return nil, err
		}
	}
	st, closeStore, err := openStore(ctx, cfg, nil, use)
	if err != nil {
		return nil, err
	}
	if err := requireCurrentSchema(ctx, st); err != nil {
		closeStore()
		return nil, err
	}
	return &configured{cfg: cfg, store: st, close: closeStore}, nil
}

// requireCurrentSchema stops a command on a store whose schema is not this
// build's (exit 2): one a newer ferry migrated (ferry.ErrSchemaNewer) would
// be read and written in a layout this build does not know; one that lacks
// a migration fails the command's queries on tables or columns it does not
// have yet. Any other failure to plan is left to the command's own queries
// to report.
func requireCurrentSchema(ctx context.Context, st ferry.Store) error {
	steps, err := st.MigratePlan(ctx)
	switch {
	case errors.Is(err, ferry.ErrSchemaNewer):
		return err
	case err != nil || len(steps) == 0:
		return nil
	case ferry.FreshSchema(steps):
		return fmt.Errorf("%w: store.url: the store has no ferry schema: check store.url, or run `ferry migrate` to make a new store", errConfig)
	}
	return fmt.Errorf("%w: %s: %s", errConfig, lacking(steps), migrateFix(steps, "ferry migrate"))
}

// listable checks a --source to list by: a configured source, or one the
// store still holds events of (a source taken out of the config keeps
// them). Anything else is sourceFlag's usage error. Only a list and a
// resolve take a retired source: replayed, its events would wait for a
// worker none runs; resolved, nothing needs to run.
func (e *configured) listable(ctx context.Context, source string) error {
	if source == "" {
		return nil
	}
	_, unknown := sourceFlag(e.cfg, source)
	if unknown == nil {
		return nil
	}
	held, err := e.store.EventList(ctx, &ferry.EventListParams{Source: source, Limit: 1})
	switch {
	case err != nil:
		return err
	case len(held.Events) == 0:
		return unknown
	}
	return nil
}

// sourceFlag is the configured source a --source flag or a SOURCE argument
// names. Any other name is a usage error listing the configured ones: a
// typo would otherwise list nothing or replay nothing, and exit 0.
func sourceFlag(cfg *config.Config, name string) (*config.Source, error) {
	for i := range cfg.Sources {
		if cfg.Sources[i].Name == name {
			return &cfg.Sources[i], nil
		}
	}
	return nil, usagef("source %q is not in the config: use one of %s", name, strings.Join(cfg.SourceNames(), ", "))
}

// storeUse says whether a command may create the store it opens.
type storeUse int

const (
	// existingStore: the command reads or changes a store in use, so a
	// missing SQLite file is a mistyped store.url, not a new store.
	existingStore storeUse = iota
	// creatingStore: serve and migrate make a new SQLite file.
	creatingStore
)

// storeConnectTimeout is every command's PostgreSQL connect_timeout where
// store.url sets none: a server (or proxy) that takes the connection and
// never answers would otherwise hold a command, or serve, for as long as
// TCP lets it.
const storeConnectTimeout = 15 * time.Second

// openStore opens the configured store, its PostgreSQL pool sized for work
// (nil: the driver's default, enough for a command's few queries); close
// releases it.
func openStore(ctx context.Context, c *config.Config, work *ferry.Workload, use storeUse) (st ferry.Store, close func(), err error) {
	kind, dsn, err := c.StoreKind()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: store.url: %v", errConfig, err)
	}
	switch kind {
	case "sqlite":
		s, err := sqlite.Open(dsn, &sqlite.Config{MustExist: use == existingStore})
		if errors.Is(err, fs.ErrNotExist) {
			where, fix := relativeTo(dsn), "fix the path, or run ferry migrate to make a new store"
			if where != "" {
				// ferry migrate here would make a second, empty store.
				fix = "run this command in the directory ferry serve runs in, or make store.url's path absolute"
			}
			return nil, nil, fmt.Errorf("%w: store.url: %w%s: %s", errConfig, err, where, fix)
		}
		if errors.Is(err, ferry.ErrInvalidParams) { // a path it cannot use: say where it looked
			err = fmt.Errorf("%w%s", err, relativeTo(dsn))
		}
		if err != nil {
			return nil, nil, storeRefused(err) // "sqlite: open PATH: ..."
		}
		return s, func() { _ = s.Close() }, nil
	default:
		pgConfig := &postgres.Config{ConnectTimeout: storeConnectTimeout}
		if work != nil {
			pgConfig.MaxConns = work.Conns()
		}
		s, err := postgres.Open(ctx, dsn, pgConfig)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w (the server did not answer within the connect timeout: store.url's connect_timeout or PGCONNECT_TIMEOUT, else %s)", err, storeConnectTimeout)
		}
		if err = storeRefused(err); err != nil && !errors.Is(err, errConfig) && ctx.Err() == nil {
			err = &unreachableError{err} // "postgres: open: ...: check store.url, ..."
		}
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}
}

// storeUnreachableFix is what to check when the store will not open for a
// reason outside the file's rules: doctor's fix line and the tail of every
// other command's error.
const storeUnreachableFix = "check store.url, that the database runs and that this host can reach it"

// unreachableError is a PostgreSQL server that refused the connection, or
// did not answer, and the fix: exit 1, since a supervisor's retry may find
// it up.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() + ": " + storeUnreachableFix }
func (e *unreachableError) Unwrap() error { return e.err }

// relativeTo says which directory a relative SQLite path was read from: a
// command run elsewhere than serve looks for the store there.
func relativeTo(path string) string {
	if filepath.IsAbs(strings.TrimPrefix(path, "file:")) {
		return ""
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return " (relative to the working directory " + wd + ")"
}

// storeRefused makes a store.url the store refuses (it would lose what it
// acknowledges, its statements would fail under what it sets, or it cannot
// run as the URL sets it) a config error naming store.url (exit 2); any
// other failure to open stays as it is.
func storeRefused(err error) error {
	if errors.Is(err, ferry.ErrNotDurable) || errors.Is(err, ferry.ErrMisconfigured) || errors.Is(err, ferry.ErrInvalidParams) {
		return fmt.Errorf("%w: store.url: %w", errConfig, err)
	}
	return err
}
