package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferry-inbox/ferry"
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
	use := creatingStore
	if *dryRun {
		use = existingStore // changes nothing, not even a new file
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	st, closeStore, err := openStore(ctx, cfg, nil, use)
	if err != nil {
		return err
	}
	defer closeStore()
	if *dryRun {
		steps, err := st.MigratePlan(ctx)
		if err != nil {
			return err
		}
		if len(steps) == 0 {
			fmt.Println("ferry: schema up to date; nothing to do")
			return nil
		}
		fresh := steps[0].Version == 1 // serve migrates a new store whole
		for _, step := range steps {
			fmt.Printf("%03d_%s: %s\n", step.Version, step.Name, step.Summary)
			if step.Exclusive != "" && !fresh {
				fmt.Printf("  stop every older ferry first; serve does not apply it on its own\n")
			}
		}
		fmt.Printf("ferry: %d migration(s) pending; run without --dry-run to apply\n", len(steps))
		return nil
	}
	// What was pending before is what this run applied (or a concurrent
	// one did: Migrate waits for it). A plan that cannot be read leaves the
	// message plain; Migrate reports what is wrong.
	pending, planErr := st.MigratePlan(ctx)
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	if planErr == nil && len(pending) > 0 {
		fmt.Printf("ferry: applied %d migration(s): %s; schema up to date\n", len(pending), strings.Join(stepNames(pending), ", "))
		return nil
	}
	fmt.Println("ferry: schema up to date")
	return nil
}

// stepNames names each migration step as its file does: 003_archive.
func stepNames(steps []ferry.MigrationStep) []string {
	names := make([]string, len(steps))
	for i, step := range steps {
		names[i] = fmt.Sprintf("%03d_%s", step.Version, step.Name)
	}
	return names
}
