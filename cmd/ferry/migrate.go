package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
)

func runMigrate(ctx context.Context, args []string) error {
	fs := newFlags("migrate", "[--config FILE] [--dry-run]",
		`Brings the store's schema up to date. Safe to run from several processes at
once; serve also migrates at start unless store.migrate = false or --no-migrate,
except a migration older instances cannot run beside (PostgreSQL's 003 archive)
on a store in use: stop every
older instance, then run this. --dry-run first says what each pending migration
will do.`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	dryRun := fs.Bool("dry-run", false, "list the pending migrations and what they will do; change nothing")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	kind, dsn, _ := cfg.StoreKind()
	st, closeStore, err := openStore(ctx, cfg, nil, existingStore)
	made := false // a new SQLite file, which migrate says it made
	if kind == "sqlite" && errors.Is(err, os.ErrNotExist) {
		if *dryRun {
			return planNewSQLite(ctx, dsn)
		}
		st, closeStore, err = openStore(ctx, cfg, nil, creatingStore)
		made = err == nil
	}
	if err != nil {
		return err
	}
	if made {
		fmt.Printf("ferry: store.url: made a new, empty store: %s%s\n", dsn, relativeTo(dsn))
	}
	defer closeStore()
	if *dryRun {
		steps, err := st.MigratePlan(ctx)
		if err != nil {
			return storeRefused(err)
		}
		printPlan(steps)
		return nil
	}
	// What was pending before is what this run applied (or a concurrent
	// one did: Migrate waits for it). A plan that cannot be read leaves the
	// message plain; Migrate reports what is wrong.
	pending, planErr := st.MigratePlan(ctx)
	if err := st.Migrate(ctx); err != nil {
		return storeRefused(err) // a search_path naming no schema: store.url's to fix
	}
	if planErr == nil && len(pending) > 0 {
		fmt.Printf("ferry: applied %d migration(s): %s; schema up to date\n", len(pending), strings.Join(stepNames(pending), ", "))
		return nil
	}
	fmt.Println("ferry: schema up to date")
	return nil
}

// printPlan prints what migrate --dry-run found pending.
func printPlan(steps []ferry.MigrationStep) {
	if len(steps) == 0 {
		fmt.Println("ferry: schema up to date; nothing to do")
		return
	}
	fresh := ferry.FreshSchema(steps) // serve migrates a new store whole
	for _, step := range steps {
		fmt.Printf("%s: %s\n", step, step.Summary)
		if step.Exclusive != "" && !fresh {
			fmt.Printf("  stop every older ferry first; serve does not apply it on its own\n")
		}
	}
	fmt.Printf("ferry: %d migration(s) pending; run without --dry-run to apply\n", len(steps))
}

// planNewSQLite is migrate --dry-run on a SQLite file that does not exist
// yet: every migration is pending. It reads the plan from a scratch store
// in a temporary directory, so the configured path stays absent.
func planNewSQLite(ctx context.Context, dsn string) error {
	dir, err := os.MkdirTemp("", "ferry-plan-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scratch, err := sqlite.Open(filepath.Join(dir, "plan.db"), nil)
	if err != nil {
		return err
	}
	defer scratch.Close()
	steps, err := scratch.MigratePlan(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("ferry: store.url: %s does not exist%s; ferry migrate (without --dry-run) creates it\n", dsn, relativeTo(dsn))
	printPlan(steps)
	return nil
}

// lacking says which migrations a schema lacks, for a refusal.
func lacking(steps []ferry.MigrationStep) string {
	return fmt.Sprintf("the store's schema lacks %d migration(s) (%s)", len(steps), strings.Join(stepNames(steps), ", "))
}

// migrateFix is the fix for a schema that lacks steps: run command (ferry
// migrate), once every older instance is stopped if a step needs that.
func migrateFix(steps []ferry.MigrationStep, command string) string {
	if step := ferry.ExclusiveStep(steps); step != nil {
		return fmt.Sprintf("stop every older ferry first (%s: %s), then run `%s`", stepNames([]ferry.MigrationStep{*step})[0], step.Exclusive, command)
	}
	return "run `" + command + "`"
}

// stepNames names each migration step as its file does: 003_archive.
func stepNames(steps []ferry.MigrationStep) []string {
	names := make([]string, len(steps))
	for i, step := range steps {
		names[i] = step.String()
	}
	return names
}
