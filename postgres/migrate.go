package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// Migrate applies every migration the schema lacks, in one transaction that
// holds an advisory lock, so instances starting together take turns and the
// schema is never half migrated.
func (s *Store) Migrate(ctx context.Context) error {
	all, err := ferry.ReadMigrations(migrations, "migration")
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
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		pending, err := ferry.PendingMigrations(all, applied)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, migrationRecordSQL, pgx.NamedArgs{"version": m.Version, "name": m.Name}); err != nil {
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

// MigratePlan lists the migrations Migrate would apply, each summarised by
// its file's leading comment and, for the archive migration, how many rows
// it moves. It reads only.
func (s *Store) MigratePlan(ctx context.Context) ([]ferry.MigrationStep, error) {
	all, err := ferry.ReadMigrations(migrations, "migration")
	if err != nil {
		return nil, wrap("migrate plan", err)
	}
	var applied []int
	var exists bool
	if err := s.pool.QueryRow(ctx, migrationExistsSQL).Scan(&exists); err != nil {
		return nil, wrap("migrate plan", err)
	}
	if exists {
		rows, _ := s.pool.Query(ctx, migrationAppliedSQL)
		if applied, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
			return nil, wrap("migrate plan", err)
		}
	}
	pending, err := ferry.PendingMigrations(all, applied)
	if err != nil {
		return nil, wrap("migrate plan", err)
	}
	var steps []ferry.MigrationStep
	for _, m := range pending {
		step := ferry.MigrationStep{Version: m.Version, Name: m.Name, Summary: ferry.MigrationSummary(m.SQL)}
		if m.Name == "archive" && exists {
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
