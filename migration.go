package ferry

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one version of a store's schema: its file NNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// ReadMigrations reads a store's migrations, the files dir/NNN_name.sql of
// fsys, in version order. A file named otherwise, or two of one version,
// is an error: the version is what the store records as applied.
func ReadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var all []Migration
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".sql")
		number, name, named := strings.Cut(base, "_")
		version, err := strconv.Atoi(number)
		if !ok || !named || name == "" || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration file %s is not named NNN_name.sql", e.Name())
		}
		sql, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		all = append(all, Migration{Version: version, Name: name, SQL: string(sql)})
	}
	slices.SortFunc(all, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(all); i++ {
		if all[i].Version == all[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", all[i-1].Name, all[i].Name, all[i].Version)
		}
	}
	return all, nil
}

// PendingMigrations is what Migrate applies and MigratePlan lists: the
// migrations of all that applied (the versions a store records) lacks, in
// order. A version applied that all lacks was written by a newer Ferry, and
// this one would misread what that schema stores: ErrSchemaNewer, naming
// the versions.
func PendingMigrations(all []Migration, applied []int) ([]Migration, error) {
	var unknown []string
	for _, v := range applied {
		if !slices.ContainsFunc(all, func(m Migration) bool { return m.Version == v }) {
			unknown = append(unknown, fmt.Sprintf("%03d", v))
		}
	}
	if len(unknown) > 0 {
		known := 0
		if len(all) > 0 {
			known = all[len(all)-1].Version
		}
		noun := "migration"
		if len(unknown) > 1 {
			noun += "s"
		}
		return nil, fmt.Errorf("%w: the store has %s %s, this ferry knows up to %03d: run the ferry that migrated it, or a newer one",
			ErrSchemaNewer, noun, strings.Join(unknown, ", "), known)
	}
	var pending []Migration
	for _, m := range all {
		if !slices.Contains(applied, m.Version) {
			pending = append(pending, m)
		}
	}
	return pending, nil
}

// String names m as its file does, without ".sql": 003_archive.
func (m Migration) String() string { return migrationName(m.Version, m.Name) }

// Failed is err from applying m, naming m: how every store's Migrate
// reports a migration that did not apply.
func (m Migration) Failed(err error) error { return fmt.Errorf("migration %s: %w", m, err) }

// migrationName is the file name, without ".sql", of migration version:
// what ReadMigrations reads and what errors and plans print.
func migrationName(version int, name string) string { return fmt.Sprintf("%03d_%s", version, name) }

// Step is m as MigratePlan lists it, before any counts a store adds.
func (m Migration) Step() MigrationStep {
	step := MigrationStep{Version: m.Version, Name: m.Name, Summary: MigrationSummary(m.SQL)}
	// The first paragraph of the leading comment that starts "Exclusive:";
	// the marker alone flags it, so a reason left out cannot unflag it.
	lines := leadingComment(m.SQL)
	for i, line := range lines {
		text, ok := strings.CutPrefix(line, "Exclusive:")
		if !ok {
			continue
		}
		paragraph := []string{text}
		for _, next := range lines[i+1:] {
			if next == "" {
				break
			}
			paragraph = append(paragraph, next)
		}
		step.Exclusive = cmp.Or(strings.TrimSpace(strings.Join(paragraph, " ")), "older instances cannot run beside it")
		break
	}
	return step
}

// MigrationSummary is what a migration file says it does: its leading "--"
// comment lines, joined into one paragraph. MigratePlan's Summary starts
// with it in both stores.
func MigrationSummary(sql string) string {
	return strings.Join(leadingComment(sql), " ")
}

// leadingComment is the text of sql's leading "--" lines, one a line.
func leadingComment(sql string) []string {
	var lines []string
	for _, line := range strings.Split(sql, "\n") {
		text, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
		if !ok {
			break
		}
		lines = append(lines, strings.TrimSpace(text))
	}
	return lines
}

// MigrationStep is one migration Migrate would apply.
type MigrationStep struct {
	Version int
	Name    string
	// Summary says what it does to this store's data, with counts where it
	// moves rows.
	Summary string
	// Exclusive says why the migration must run with every older Ferry
	// stopped, from the paragraph of its leading comment that starts
	// "Exclusive:"; empty when older instances may keep running beside it.
	// ferry serve does not apply such a migration on its own.
	Exclusive string
}

// String names s as its migration file does: 003_archive.
func (s MigrationStep) String() string { return migrationName(s.Version, s.Name) }

// MigrateRolling is Migrate for a start beside instances of an older
// version, as in a rolling upgrade, and is how ferry serve migrates. It
// applies every migration the schema lacks unless one is Exclusive: then it
// changes nothing and returns an error wrapping ErrMigrationExclusive, and
// that step is for Store.Migrate once every older instance is stopped. A
// new store (FreshSchema) is migrated whole: no older instance runs on it.
func MigrateRolling(ctx context.Context, st Store) error {
	steps, err := st.MigratePlan(ctx)
	if err != nil {
		return err
	}
	if step := ExclusiveStep(steps); step != nil {
		return fmt.Errorf("%w: %s needs every older instance stopped (%s)", ErrMigrationExclusive, step, step.Exclusive)
	}
	return st.Migrate(ctx)
}

// ExclusiveStep is the first of steps, a MigratePlan, that needs every
// older instance stopped; nil when none does, or when the store is new
// (FreshSchema): no older instance runs on it.
func ExclusiveStep(steps []MigrationStep) *MigrationStep {
	if FreshSchema(steps) {
		return nil
	}
	for i := range steps {
		if steps[i].Exclusive != "" {
			return &steps[i]
		}
	}
	return nil
}

// FreshSchema reports whether steps, a MigratePlan, are every migration: a
// store with no Ferry schema yet.
func FreshSchema(steps []MigrationStep) bool { return len(steps) > 0 && steps[0].Version == 1 }
