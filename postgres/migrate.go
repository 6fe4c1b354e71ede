package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

type migration struct {
	version int
	name    string
	sql     string
}

// Migrate applies every migration the schema lacks, in one transaction that
// holds an advisory lock, so instances starting together take turns and the
// schema is never half migrated.
func (s *Store) Migrate(ctx context.Context) error {
	all, err := loadMigrations()
	if err != nil {
		return wrap("migrate", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, sql := range []string{migrationLockSQL, migrationTableSQL} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
		}
		rows, _ := tx.Query(ctx, migrationAppliedSQL)
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		for _, m := range all {
			if slices.Contains(applied, int32(m.version)) {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d %s: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, migrationRecordSQL, pgx.NamedArgs{"version": m.version, "name": m.name}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return wrap("migrate", err)
	}
	return nil
}

// loadMigrations parses the embedded files, ordered by version.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migration/*.sql")
	if err != nil {
		return nil, err
	}
	var all []migration
	for _, path := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(path, "migration/"), ".sql")
		number, name, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(number)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %s is not named NNN_name.sql", path)
		}
		sql, err := migrations.ReadFile(path)
		if err != nil {
			return nil, err
		}
		all = append(all, migration{version: version, name: name, sql: string(sql)})
	}
	slices.SortFunc(all, func(a, b migration) int { return a.version - b.version })
	return all, nil
}

// MigratePlan lists the migrations Migrate would apply, each summarised by
// its file's leading comment and, for the archive migration, how many rows
// it moves. It reads only.
func (s *Store) MigratePlan(ctx context.Context) ([]ferry.MigrationStep, error) {
	all, err := loadMigrations()
	if err != nil {
		return nil, wrap("migrate plan", err)
	}
	var applied []int32
	var exists bool
	if err := s.pool.QueryRow(ctx, migrationExistsSQL).Scan(&exists); err != nil {
		return nil, wrap("migrate plan", err)
	}
	if exists {
		rows, _ := s.pool.Query(ctx, migrationAppliedSQL)
		if applied, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
			return nil, wrap("migrate plan", err)
		}
	}
	var steps []ferry.MigrationStep
	for _, m := range all {
		if slices.Contains(applied, int32(m.version)) {
			continue
		}
		step := ferry.MigrationStep{Version: m.version, Name: m.name, Summary: ferry.MigrationSummary(m.sql)}
		if m.name == "archive" && exists {
			var events, done, days, ledger int64
			if err := s.pool.QueryRow(ctx, migratePlanArchiveSQL).Scan(&events, &done, &days, &ledger); err != nil {
				return nil, wrap("migrate plan", err)
			}
			step.Summary += fmt.Sprintf("\nOn this store: %d events get a dedupe key; %d done events move to %d daily partitions of ferry_event_done, their %d ledger rows to ferry_attempt_done's; %d stay in ferry_event.",
				events, done, days, ledger, events-done)
		}
		steps = append(steps, step)
	}
	return steps, nil
}
